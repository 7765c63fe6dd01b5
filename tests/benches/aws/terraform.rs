//! The Terraform side of the AWS bench: the same 3 × n resources with the same provider binary
//! against the same (reset) moto, at the level's `-parallelism` and the comparison's `GOGC`;
//! each change sample both as a full `apply` (refresh of everything, plan, apply) and as
//! `apply -refresh=false -target=<the one resource>`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kraken_tests::bench::{
    RssSampler, Seen, apply_summary, aws_provider, processes_named, terraform, terraform_watched,
};
use kraken_tests::moto::AMI;
use kraken_tests::operator::aws::AwsBed;
use serde_json::json;

use crate::Config;
use crate::kraken::Target;

/// A Terraform working directory with the same resources against `endpoint`; the change
/// samples set the map variables `tags` (instance index → extra tags) and `vts` (queue index
/// → visibility timeout).
fn terraform_dir(endpoint: &str, n: usize, version: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = kraken_tests::scratch_dir("kraken-bench-aws-tf-")?;
    let header =
        kraken_tests::bench::aws_terraform_header(endpoint, version, &["ec2", "sqs", "sns"]);
    let main = format!(
        r#"{header}variable "vts" {{
  type    = map(number)
  default = {{}}
}}
variable "tags" {{
  type    = map(map(string))
  default = {{}}
}}
resource "aws_instance" "i" {{
  count         = {n}
  ami           = "{AMI}"
  instance_type = "t3.micro"
  tags          = merge({{ bench = "terraform" }}, lookup(var.tags, tostring(count.index), {{}}))
}}
resource "aws_sqs_queue" "q" {{
  count                      = {n}
  name                       = "tf-q-${{count.index}}"
  visibility_timeout_seconds = lookup(var.vts, tostring(count.index), 30)
}}
resource "aws_sns_topic" "t" {{
  count = {n}
  name  = "tf-t-${{count.index}}"
}}
"#
    );
    std::fs::write(dir.path().join("main.tf"), main)?;
    Ok(dir)
}

/// What the Terraform pass measured.
pub struct TerraformRun {
    pub parallelism: usize,
    pub apply: Duration,
    /// Per target: full applies, then targeted ones.
    pub changes: Vec<(Target, Vec<Duration>, Vec<Duration>)>,
    /// With `KRAKEN_BENCH_AWS_DELETE=1`.
    pub destroy: Option<Duration>,
    /// (peak, settled) of terraform and its provider process.
    pub memory: (u64, u64),
    /// The provider processes it ran.
    pub seen: BTreeSet<Seen>,
}

/// The change samples' variables and the runs that apply them.
struct Changes<'a> {
    dir: &'a std::path::Path,
    cfg: &'a Config,
    parallelism: String,
    tags: serde_json::Map<String, serde_json::Value>,
    vts: serde_json::Map<String, serde_json::Value>,
    seen: BTreeSet<Seen>,
}

impl Changes<'_> {
    /// Sample `c` of `target`: the variables changed for one resource, then `terraform apply`,
    /// targeted at that resource or not; it must change exactly that one.
    fn sample(&mut self, target: Target, c: usize, targeted: bool) -> anyhow::Result<Duration> {
        let i = Target::index(c, self.cfg.n);
        let address = match target {
            Target::InstanceTag => {
                self.tags
                    .insert(i.to_string(), json!({"change": c.to_string()}));
                format!("-target=aws_instance.i[{i}]")
            }
            Target::QueueTimeout => {
                self.vts.insert(i.to_string(), json!(40 + c));
                format!("-target=aws_sqs_queue.q[{i}]")
            }
        };
        let vars = json!({"tags": self.tags, "vts": self.vts}).to_string();
        std::fs::write(self.dir.join("terraform.tfvars.json"), vars)?;
        let mut args = vec!["apply", "-auto-approve", "-input=false", "-no-color"];
        args.push(&self.parallelism);
        if targeted {
            args.extend(["-refresh=false", address.as_str()]);
        }
        let run = terraform_watched(self.dir, &args, self.cfg.gogc, &[0])?;
        let stdout = String::from_utf8_lossy(&run.out.stdout);
        ensure!(
            apply_summary(&stdout) == Some((0, 1, 0)),
            "terraform {} did not change exactly one resource: {}",
            args.join(" "),
            stdout.lines().last().unwrap_or_default()
        );
        self.seen.extend(run.seen);
        Ok(run.took)
    }
}

/// Terraform's pass on `ab`'s moto (reset by the caller) at `-parallelism=P`.
pub fn pass(ab: &AwsBed, cfg: &Config, parallelism: usize) -> anyhow::Result<TerraformRun> {
    let (_, version) = aws_provider()?;
    let dir = terraform_dir(&ab.moto.endpoint(), cfg.n, &version)?;
    terraform(dir.path(), &["init", "-input=false", "-no-color"])?;
    let p = format!("-parallelism={parallelism}");
    let apply = ["apply", "-auto-approve", "-input=false", "-no-color", &p];
    let cli = kraken_tests::TestEnv::load()?.path("KRAKEN_TEST_TERRAFORM")?;
    let cli = cli
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .context("the Terraform CLI path has no file name")?;
    let sampler = RssSampler::start(vec![Box::new(move || processes_named(&cli))]);
    let created = terraform_watched(dir.path(), &apply, cfg.gogc, &[0])?;
    let mut ch = Changes {
        dir: dir.path(),
        cfg,
        parallelism: p.clone(),
        tags: serde_json::Map::new(),
        vts: serde_json::Map::new(),
        seen: created.seen,
    };
    let mut samples = Vec::new();
    // Full applies refresh all 3 × n: fewer samples. Targeted ones get new sample numbers, so
    // every sample is a change.
    let tf_queue = cfg.queue_changes.min(1);
    for (target, k) in [
        (Target::InstanceTag, cfg.tf_changes),
        (Target::QueueTimeout, tf_queue),
    ] {
        let full: Vec<Duration> = (0..k)
            .map(|c| ch.sample(target, c, false))
            .collect::<anyhow::Result<_>>()?;
        let targeted: Vec<Duration> = (k..2 * k)
            .map(|c| ch.sample(target, c, true))
            .collect::<anyhow::Result<_>>()?;
        samples.push((target, full, targeted));
    }
    let memory = sampler.finish().first().copied().unwrap_or_default();
    let destroy = if cfg.delete {
        let start = Instant::now();
        let args = ["destroy", "-auto-approve", "-input=false", "-no-color", &p];
        terraform_watched(dir.path(), &args, cfg.gogc, &[0])?;
        Some(start.elapsed())
    } else {
        None
    };
    Ok(TerraformRun {
        parallelism,
        apply: created.took,
        changes: samples,
        destroy,
        memory,
        seen: ch.seen,
    })
}
