//! Variables: their values from defaults, `TF_VAR_*`, `.tfvars` files and `--var`, typed,
//! checked against their validation blocks; and the problems conversion reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hcl::Expression;
use serde_json::Value as Json;

use super::eval::{Scope, Val, eval, text};
use super::load::{Block, Location, Module};

/// Where variable values come from besides the defaults, in Terraform's order of precedence
/// (later wins): the environment's `TF_VAR_*`, then `terraform.tfvars`,
/// `terraform.tfvars.json` and `*.auto.tfvars` in the module, then `--var-file` and `--var` in
/// the order given.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub env: Vec<(String, String)>,
    /// `--var-file` and `--var`, in command-line order.
    pub given: Vec<Given>,
    /// Variables given a value that reads another object (a local module's inputs): they
    /// have a value, not known here, so they are neither missing nor validated.
    pub refs: std::collections::BTreeSet<String>,
}

#[derive(Debug, Clone)]
pub enum Given {
    File(PathBuf),
    Var(String, String),
    /// A value given by a `module` block's argument, where it is written.
    Value(String, Json, Location),
}

/// Something conversion could not do, with where it is written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    pub at: Location,
    /// The Terraform address or name concerned (`aws_vpc.main[0]`, `var.cidr`).
    pub subject: String,
    pub message: String,
    /// Stops the conversion (nothing is written unless `--partial`); else the object is
    /// written without what is reported.
    pub blocking: bool,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.at, self.subject, self.message)
    }
}

pub(super) fn problem(at: &Location, subject: &str, message: String) -> Problem {
    Problem {
        at: at.clone(),
        subject: subject.to_owned(),
        message,
        blocking: true,
    }
}

/// A problem that does not stop the conversion.
pub(super) fn note(at: &Location, subject: &str, message: String) -> Problem {
    Problem {
        blocking: false,
        ..problem(at, subject, message)
    }
}

/// The module's own variables files, in Terraform's order: `terraform.tfvars`,
/// `terraform.tfvars.json`, then `*.auto.tfvars(.json)` by name.
fn module_var_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["terraform.tfvars", "terraform.tfvars.json"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| p.is_file())
        .collect();
    let mut auto: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            n.ends_with(".auto.tfvars") || n.ends_with(".auto.tfvars.json")
        })
        .collect();
    auto.sort();
    files.extend(auto);
    files
}

/// The module's own variables files, through its guard: they are the configuration's, so
/// confined when it is (a `--var-file` is the user's choice, not the configuration's).
fn own_var_files(module: &Module, problems: &mut Vec<Problem>) -> Vec<Given> {
    let mut given = Vec::new();
    for file in module_var_files(&module.dir) {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
        match module.guard.resolve(&module.dir, &name.unwrap_or_default()) {
            Ok(real) => given.push(Given::File(real)),
            Err(message) => problems.push(Problem {
                at: Location {
                    file: file.display().to_string(),
                    ..Location::default()
                },
                subject: "variables file".into(),
                message,
                blocking: true,
            }),
        }
    }
    given
}

/// Every variable's value, by precedence; problems for missing values and failed validations.
pub(super) fn variables(
    module: &Module,
    inputs: &Inputs,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, Json> {
    let declared: BTreeMap<String, &Block> = module
        .of_kind("variable")
        .filter_map(|b| b.labels.first().map(|n| (n.clone(), b)))
        .collect();
    // Defaults, variables files and validations evaluate within the module's guard: a
    // default may call file() too.
    let base = Scope {
        module_dir: module.dir.display().to_string(),
        guard: module.guard.clone(),
        ..Scope::default()
    };
    let mut values = defaults(&declared, &base, problems);
    let mut set = |name: &str, raw: Raw, at: &Location, problems: &mut Vec<Problem>| {
        let Some(b) = declared.get(name) else {
            problems.push(problem(
                at,
                &format!("var.{name}"),
                "a value is given for a variable that is not declared".into(),
            ));
            return;
        };
        match typed(raw, b, &base) {
            Ok(v) => {
                values.insert(name.to_owned(), v);
            }
            Err(e) => problems.push(problem(at, &format!("var.{name}"), e)),
        }
    };
    let env_at = Location {
        file: "(environment)".into(),
        ..Location::default()
    };
    for (k, v) in &inputs.env {
        if let Some(name) = k.strip_prefix("TF_VAR_")
            && declared.contains_key(name)
        {
            set(name, Raw::Text(v.clone()), &env_at, problems);
        }
    }
    let mut given = own_var_files(module, problems);
    given.extend(inputs.given.iter().cloned());
    for g in given {
        match g {
            Given::File(path) => match tfvars(&path, &base) {
                Ok(pairs) => pairs
                    .into_iter()
                    .for_each(|(k, v, at)| set(&k, Raw::Value(v), &at, problems)),
                Err(p) => problems.push(p),
            },
            Given::Var(k, v) => {
                let at = Location {
                    file: "(--var)".into(),
                    ..Location::default()
                };
                set(&k, Raw::Text(v), &at, problems);
            }
            Given::Value(k, v, at) => set(&k, Raw::Value(v), &at, problems),
        }
    }
    for (name, b) in &declared {
        if !values.contains_key(name) && !inputs.refs.contains(name) {
            problems.push(problem(
                &b.at,
                &format!("var.{name}"),
                "no value: it has no default and none was given (--var, --var-file, TF_VAR_)"
                    .into(),
            ));
        }
    }
    validate(&declared, &values, &base, problems);
    values
}

/// Each declared variable's `default`, when it has one.
fn defaults(
    declared: &BTreeMap<String, &Block>,
    empty: &Scope,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, Json> {
    let mut values = BTreeMap::new();
    for (name, b) in declared {
        if let Some((e, at)) = b.body.attribute("default") {
            match eval(e, empty) {
                Ok(Val::Known(j)) => {
                    values.insert(name.clone(), j);
                }
                _ => problems.push(problem(
                    at,
                    &format!("var.{name}"),
                    "the default is not a constant".into(),
                )),
            }
        }
    }
    values
}

/// A variable value as given: text from the command line or environment (an HCL expression
/// unless the variable is a string), or a value from a file.
enum Raw {
    Text(String),
    Value(Json),
}

fn typed(raw: Raw, b: &Block, empty: &Scope) -> Result<Json, String> {
    let ty = b
        .body
        .attribute("type")
        .map(|(e, _)| text(e))
        .unwrap_or_default();
    let v = match raw {
        Raw::Value(v) => v,
        Raw::Text(t) if ty.is_empty() || ty == "string" => Json::String(t),
        Raw::Text(t) => {
            let e: Expression = t
                .parse()
                .map_err(|e| format!("{t:?} is not a value of type {ty}: {e}"))?;
            match eval(&e, empty).map_err(|e| e.0)? {
                Val::Known(j) => j,
                _ => return Err(format!("{t:?} is not a constant")),
            }
        }
    };
    match (ty.as_str(), &v) {
        ("number", Json::String(s)) => s
            .trim()
            .parse::<f64>()
            .map(super::eval::num)
            .map_err(|_| format!("{s:?} is not a number")),
        ("bool", Json::String(s)) if s == "true" || s == "false" => Ok(Json::Bool(s == "true")),
        ("string", Json::Number(n)) => Ok(Json::String(n.to_string())),
        ("string", Json::Bool(x)) => Ok(Json::String(x.to_string())),
        _ => Ok(v),
    }
}

/// A `.tfvars` (HCL) or `.tfvars.json` file's assignments.
fn tfvars(path: &Path, empty: &Scope) -> Result<Vec<(String, Json, Location)>, Problem> {
    let module = super::load::load_file(path, &empty.guard).map_err(|e| Problem {
        at: Location {
            file: path.display().to_string(),
            ..Location::default()
        },
        subject: "variables file".into(),
        message: e.to_string(),
        blocking: true,
    })?;
    let mut out = Vec::new();
    for (name, e, at) in module.attributes {
        match eval(&e, empty) {
            Ok(Val::Known(j)) => out.push((name, j, at)),
            _ => {
                return Err(problem(
                    &at,
                    &format!("var.{name}"),
                    "a variables file may hold only constants".into(),
                ));
            }
        }
    }
    Ok(out)
}

/// Runs each variable's `validation` blocks; a failed condition reports its error message.
fn validate(
    declared: &BTreeMap<String, &Block>,
    values: &BTreeMap<String, Json>,
    base: &Scope,
    problems: &mut Vec<Problem>,
) {
    let scope = Scope {
        vars: std::sync::Arc::new(values.clone()),
        ..base.clone()
    };
    for (name, b) in declared {
        if !values.contains_key(name) {
            continue;
        }
        for v in b.body.blocks_of("validation") {
            let Some((cond, at)) = v.body.attribute("condition") else {
                continue;
            };
            let message = v
                .body
                .attribute("error_message")
                .and_then(|(e, _)| eval(e, &scope).ok())
                .and_then(|v| v.known().and_then(Json::as_str).map(str::to_owned))
                .unwrap_or_else(|| "validation failed".into());
            match eval(cond, &scope) {
                Ok(Val::Known(Json::Bool(true))) => {}
                Ok(Val::Known(Json::Bool(false))) => {
                    problems.push(problem(
                        at,
                        &format!("var.{name}"),
                        format!("validation failed: {message}"),
                    ));
                }
                Ok(_) => problems.push(problem(
                    at,
                    &format!("var.{name}"),
                    "a validation condition that is not a bool".into(),
                )),
                Err(e) => problems.push(problem(
                    at,
                    &format!("var.{name}"),
                    format!("validation: {}", e.0),
                )),
            }
        }
    }
}
