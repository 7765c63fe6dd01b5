//! The object a command acts on: `KIND/NAME` (or `KIND NAME`, as kubectl also takes it),
//! resolved through discovery ([`discover`](super::discover)) in the session's namespace.

use anyhow::Context as _;
use kube::api::{Api, DynamicObject};

use super::connect::Session;
use super::discover::{self, KrakenKind};

/// The object argument of `show-plan` and `approve`.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArg {
    /// The object as KIND/NAME. KIND as kubectl takes it: plural, singular, kind or short name,
    /// optionally with its group (objects.fixture.tf.kraken.dev).
    #[arg(value_name = "KIND/NAME")]
    pub kind: String,
    /// The name, when KIND is given alone (kubectl's `KIND NAME` form).
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
}

impl TargetArg {
    /// The kind and the name the argument(s) give.
    fn parts(&self) -> anyhow::Result<(&str, &str)> {
        let (kind, name) = match (&self.name, self.kind.split_once('/')) {
            (None, Some((kind, name))) => (kind, name),
            (Some(name), None) => (self.kind.as_str(), name.as_str()),
            (None, None) => anyhow::bail!(
                "{:?} names no object: write KIND/NAME (objects.fixture.tf.kraken.dev/web) or \
                 KIND NAME",
                self.kind
            ),
            (Some(_), Some(_)) => anyhow::bail!(
                "give the object either as KIND/NAME or as KIND NAME, not both ({:?})",
                self.kind
            ),
        };
        if kind.is_empty() || name.is_empty() || name.contains('/') {
            anyhow::bail!(
                "{:?} is not KIND/NAME (objects.fixture.tf.kraken.dev/web)",
                self.kind
            );
        }
        Ok((kind, name))
    }
}

/// One object of a Kraken kind, located but not yet read.
pub(super) struct Target {
    pub kind: KrakenKind,
    pub name: String,
    /// None for a cluster-scoped kind.
    pub namespace: Option<String>,
    pub api: Api<DynamicObject>,
}

impl Target {
    /// Resolves the argument's kind through discovery, in the session's namespace.
    pub async fn locate(session: &Session, arg: &TargetArg) -> anyhow::Result<Self> {
        let (kind, name) = arg.parts()?;
        let kinds = discover::kraken_kinds(&session.client).await?;
        let kind = discover::resolve(&kinds, kind)?.clone();
        let client = session.client.clone();
        let (api, namespace) = if kind.namespaced {
            let ns = session.namespace.clone();
            (Api::namespaced_with(client, &ns, &kind.resource), Some(ns))
        } else {
            (Api::all_with(client, &kind.resource), None)
        };
        Ok(Self {
            kind,
            name: name.to_owned(),
            namespace,
            api,
        })
    }

    /// `plural.group/name`: what every command takes back.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.kind.qualified(), self.name)
    }

    /// The reference with the namespace flag a command needs to find it again.
    pub fn command_args(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} -n {ns}", self.reference()),
            None => self.reference(),
        }
    }

    /// The object in words: `Object web (objects.fixture.tf.kraken.dev) in namespace ns`.
    pub fn describe(&self) -> String {
        let at = self
            .namespace
            .as_ref()
            .map(|ns| format!(" in namespace {ns}"))
            .unwrap_or_default();
        format!(
            "{} {} ({}){at}",
            self.kind.resource.kind,
            self.name,
            self.kind.qualified()
        )
    }

    /// Reads the object; its absence is an error naming where it was looked for.
    pub async fn fetch(&self) -> anyhow::Result<DynamicObject> {
        self.api
            .get_opt(&self.name)
            .await
            .with_context(|| format!("failed to read {}", self.describe()))?
            .with_context(|| format!("{} not found", self.describe()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(kind: &str, name: Option<&str>) -> TargetArg {
        TargetArg {
            kind: kind.to_owned(),
            name: name.map(str::to_owned),
        }
    }

    #[test]
    fn kind_and_name_in_either_form() {
        assert_eq!(arg("pets/a", None).parts().ok(), Some(("pets", "a")));
        assert_eq!(arg("pets", Some("a")).parts().ok(), Some(("pets", "a")));
        for (k, n) in [
            ("pets", None),
            ("pets/a", Some("b")),
            ("/a", None),
            ("pets/", None),
            ("pets/a/b", None),
        ] {
            assert!(arg(k, n).parts().is_err(), "{k} {n:?}");
        }
    }
}
