//! go-plugin's handshake: the cookie a plugin needs to agree to run, and the line it prints on
//! stdout once it listens (where, which protocol, and its AutoMTLS certificate).

/// Terraform's go-plugin handshake: a plugin refuses to run without this cookie.
pub const MAGIC_COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
pub const MAGIC_COOKIE_VALUE: &str =
    "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";

/// The parsed go-plugin handshake line:
/// `CORE-VERSION|APP-PROTOCOL-VERSION|NETWORK|ADDRESS|PROTOCOL[|SERVER-CERT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    pub app_protocol: u32,
    pub network: Network,
    pub address: String,
    pub server_cert: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    Unix,
    Tcp,
}

impl Handshake {
    pub fn parse(line: &str) -> Result<Self, String> {
        let fields: Vec<&str> = line.trim().split('|').collect();
        if fields.len() < 5 {
            return Err(format!(
                "expected at least 5 fields, found {}",
                fields.len()
            ));
        }
        if fields[0] != "1" {
            return Err(format!(
                "unsupported go-plugin core protocol {:?}",
                fields[0]
            ));
        }
        let app_protocol = fields[1]
            .parse()
            .map_err(|_| format!("protocol version {:?} is not a number", fields[1]))?;
        let network = match fields[2] {
            "unix" => Network::Unix,
            "tcp" => Network::Tcp,
            other => return Err(format!("unsupported network type {other:?}")),
        };
        if fields[4] != "grpc" {
            return Err(format!(
                "plugin serves {:?}; only grpc is supported",
                fields[4]
            ));
        }
        let server_cert = fields
            .get(5)
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        Ok(Self {
            app_protocol,
            network,
            address: fields[3].to_string(),
            server_cert,
        })
    }

    /// The line a plugin prints to announce this handshake (what a runner prints for the
    /// provider it relays).
    pub fn line(&self) -> String {
        let network = match self.network {
            Network::Unix => "unix",
            Network::Tcp => "tcp",
        };
        format!(
            "1|{}|{network}|{}|grpc|{}",
            self.app_protocol,
            self.address,
            self.server_cert.as_deref().unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_handshake_lines() {
        let h = Handshake::parse("1|6|unix|/tmp/plugin1|grpc|AQID\n").expect("parse");
        assert_eq!(h.app_protocol, 6);
        assert_eq!(h.network, Network::Unix);
        assert_eq!(h.address, "/tmp/plugin1");
        assert_eq!(h.server_cert.as_deref(), Some("AQID"));
        let plain = Handshake::parse("1|5|tcp|127.0.0.1:1234|grpc|").expect("parse");
        assert_eq!(plain.server_cert, None);
        assert_eq!(plain.network, Network::Tcp);
        assert_eq!(Handshake::parse(&h.line()).expect("again"), h);
        assert_eq!(Handshake::parse(&plain.line()).expect("again"), plain);
    }

    #[test]
    fn rejects_bad_handshakes() {
        for (line, needle) in [
            ("1|5|unix", "at least 5"),
            ("2|5|unix|/x|grpc", "core protocol"),
            ("1|x|unix|/x|grpc", "not a number"),
            ("1|5|pipe|/x|grpc", "network"),
            ("1|5|unix|/x|netrpc", "only grpc"),
        ] {
            let err = Handshake::parse(line).expect_err(line);
            assert!(err.contains(needle), "{line}: {err}");
        }
    }
}
