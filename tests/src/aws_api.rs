//! Reading (and changing behind Kraken's back) what moto holds, through the AWS SDK for Python
//! that ships in moto's own venv: any service, any operation, as a user with the AWS CLI would.
//! Tests assert on this view, never on what Kraken reports.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::TestEnv;
use crate::moto::REGION;

/// One boto3 call per process: `SERVICE OPERATION PARAMS_JSON` → the response as JSON on
/// stdout, or `{"error": CODE, "message": ...}` and exit status 3 for an AWS error.
const CALL: &str = r#"
import json, sys
import boto3, botocore.config, botocore.exceptions
endpoint, region, service, op, params = sys.argv[1:6]
client = boto3.client(
    service, endpoint_url=endpoint, region_name=region,
    aws_access_key_id="testing", aws_secret_access_key="testing",
    config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
try:
    answer = getattr(client, op)(**json.loads(params))
except botocore.exceptions.ClientError as e:
    err = e.response.get("Error", {})
    print(json.dumps({"error": err.get("Code", ""), "message": err.get("Message", "")}))
    sys.exit(3)
answer.pop("ResponseMetadata", None)
for key, value in list(answer.items()):
    if hasattr(value, "read"):
        answer[key] = value.read().decode("utf-8", "replace")
print(json.dumps(answer, default=str))
"#;

/// The AWS API of one moto server.
pub struct AwsApi {
    python: PathBuf,
    endpoint: String,
}

impl AwsApi {
    /// Calls go to `endpoint` (moto) in [`REGION`], with moto's dummy credentials.
    pub fn new(endpoint: &str) -> anyhow::Result<Self> {
        let moto = TestEnv::load()?.path("KRAKEN_TEST_MOTO")?;
        let python = moto
            .parent()
            .map(|d| d.join("python"))
            .context("moto_server has no directory")?;
        Ok(Self {
            python,
            endpoint: endpoint.to_owned(),
        })
    }

    /// `service.operation(**params)` (boto3 names: `ec2`, `describe_vpcs`), or the AWS error
    /// code it failed with.
    pub fn try_call(
        &self,
        service: &str,
        operation: &str,
        params: &Value,
    ) -> anyhow::Result<Result<Value, String>> {
        let out = Command::new(&self.python)
            .args(["-c", CALL, &self.endpoint, REGION, service, operation])
            .arg(params.to_string())
            .output()
            .with_context(|| format!("running {}", self.python.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let answer: Option<Value> = serde_json::from_str(stdout.trim()).ok();
        match (out.status.code(), answer) {
            (Some(0), Some(v)) => Ok(Ok(v)),
            (Some(3), Some(v)) => Ok(Err(v["error"].as_str().unwrap_or_default().to_owned())),
            _ => bail!(
                "{service}.{operation}({params}) failed ({}): {}{}",
                out.status,
                stdout,
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// Like [`AwsApi::try_call`], with an AWS error as an error.
    pub fn call(&self, service: &str, operation: &str, params: &Value) -> anyhow::Result<Value> {
        match self.try_call(service, operation, params)? {
            Ok(v) => Ok(v),
            Err(code) => bail!("{service}.{operation}({params}) answered {code}"),
        }
    }
}
