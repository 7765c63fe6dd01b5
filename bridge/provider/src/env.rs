//! The environment a provider process starts with. Providers are third-party code that
//! namespace users configure, so they never inherit the operator's environment wholesale: a
//! provider that falls back to ambient credentials (`AWS_*`, `GOOGLE_*`, a kubeconfig) would
//! otherwise act with the operator's identity on a tenant's behalf.
//!
//! What a provider gets: the go-plugin handshake variables, `HOME` and `TMPDIR` pointing at its
//! private directory (so no `~/.aws`, `~/.kube` or cache of the operator's is found), the
//! variables in [`ALWAYS_INHERITED`] (the proxy and CA-bundle settings and `PATH`, none of which
//! grant anything), the variables an administrator opts in with `kraken operator
//! --provider-env NAME` (a trailing `*` matches a prefix), and what the launcher sets
//! explicitly (`LaunchOptions::env`).

use std::ffi::OsString;

/// Inherited by every provider: how to reach the network and trust its certificates.
pub const ALWAYS_INHERITED: &[&str] = &[
    "PATH",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Whether variable `name` matches one of `patterns` (exact names, or prefixes ending in `*`).
pub fn matches(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// The variables of `from` a provider inherits under `opt_in`: [`ALWAYS_INHERITED`] and the
/// administrator's patterns, nothing else.
pub fn inherited(
    from: impl IntoIterator<Item = (OsString, OsString)>,
    opt_in: &[String],
) -> Vec<(OsString, OsString)> {
    from.into_iter()
        .filter(|(k, _)| {
            let name = k.to_string_lossy();
            ALWAYS_INHERITED.contains(&name.as_ref()) || matches(opt_in, &name)
        })
        .collect()
}

/// The `defaults` (`kraken operator --provider-gogc`) a process gets: those it does not
/// inherit, so an administrator's own value passed with `--provider-env` wins.
pub fn defaults_not_inherited<'a>(
    inherited: &[(OsString, OsString)],
    defaults: &'a [(String, String)],
) -> Vec<&'a (String, String)> {
    defaults
        .iter()
        .filter(|(key, _)| !inherited.iter().any(|(k, _)| k.to_str() == Some(key)))
        .collect()
}

/// A `--provider-env` pattern: a variable name, or a prefix followed by `*`.
pub fn parse_pattern(s: &str) -> Result<String, String> {
    let name = s.strip_suffix('*').unwrap_or(s);
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if valid {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not an environment variable name (letters, digits, _), optionally ending in *"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn a_default_yields_to_an_inherited_value() {
        let defaults = vec![("GOGC".to_owned(), "50".to_owned())];
        let none = defaults_not_inherited(&vars(&[("PATH", "/bin")]), &defaults);
        assert_eq!(none, vec![&defaults[0]]);
        let admins = defaults_not_inherited(&vars(&[("GOGC", "200")]), &defaults);
        assert!(admins.is_empty(), "the inherited GOGC wins: {admins:?}");
    }

    #[test]
    fn only_the_network_settings_and_what_the_admin_opts_in_pass() {
        let from = vars(&[
            ("PATH", "/usr/bin"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("AWS_SECRET_ACCESS_KEY", "operator-secret"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/operator"),
            ("KUBECONFIG", "/home/op/.kube/config"),
            ("HOME", "/home/op"),
            ("KRAKEN_FIXTURE_HANG", "1"),
            ("KRAKEN_FIXTURE_CRASH_ONCE_FILE", "/tmp/x"),
            ("KRAKEN_FIXTURES", "no"),
        ]);
        let names = |opt_in: &[String]| -> Vec<String> {
            inherited(from.clone(), opt_in)
                .into_iter()
                .map(|(k, _)| k.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(&[]), ["PATH", "HTTPS_PROXY"]);
        assert_eq!(
            names(&["KRAKEN_FIXTURE_*".into(), "AWS_ROLE_ARN".into()]),
            [
                "PATH",
                "HTTPS_PROXY",
                "AWS_ROLE_ARN",
                "KRAKEN_FIXTURE_HANG",
                "KRAKEN_FIXTURE_CRASH_ONCE_FILE"
            ]
        );
    }

    #[test]
    fn patterns_are_names_or_prefixes() {
        assert_eq!(parse_pattern("AWS_*").as_deref(), Ok("AWS_*"));
        assert_eq!(
            parse_pattern("GOOGLE_CREDENTIALS").as_deref(),
            Ok("GOOGLE_CREDENTIALS")
        );
        for bad in ["", "*", "A=B", "1ABC", "FOO BAR", "*AWS"] {
            assert!(parse_pattern(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
