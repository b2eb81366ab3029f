//! A network namespace joined to this host by a veth pair, for a test to run a process in and
//! cut off for real: with the host's end down, its packets go nowhere and its connections hang,
//! as in a network partition. Needs root and iproute2 (`ip`); removed when dropped.

use std::net::IpAddr;
use std::process::Command;

pub struct Netns {
    name: String,
    host_if: String,
    /// The host's end's address, which processes inside reach.
    pub host_ip: IpAddr,
    /// The namespace's own address on the pair.
    pub inner_ip: IpAddr,
}

impl Netns {
    /// Makes one, numbered `n` among a test's (0 to 49); `None` after the skip policy's message
    /// when this host cannot (not root, no `ip`).
    pub fn create(n: u8) -> Option<Netns> {
        assert!(n < 50, "at most 50 namespaces a test process");
        let pid = std::process::id();
        let name = format!("corral-{pid}-{n}");
        let host_if = format!("cv{}h{n}", pid % 1_000_000);
        let inner_if = format!("cv{}n{n}", pid % 1_000_000);
        // Distinct per process and per namespace: 10.(200..250).(pid % 250).0/24.
        let (a, b) = (200 + n, pid % 250);
        let host_ip: IpAddr = format!("10.{a}.{b}.1").parse().unwrap();
        let made = ip(&["netns", "add", &name]);
        crate::require_ok("network namespaces (root and iproute2)", made)?;
        let ns = Netns {
            name,
            host_if,
            host_ip,
            inner_ip: format!("10.{a}.{b}.2").parse().unwrap(),
        };
        for args in [
            vec![
                "link",
                "add",
                &ns.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &inner_if,
            ],
            vec!["link", "set", &inner_if, "netns", &ns.name],
            vec![
                "addr",
                "add",
                &format!("10.{a}.{b}.1/24"),
                "dev",
                &ns.host_if,
            ],
            vec!["link", "set", &ns.host_if, "up"],
            vec![
                "netns",
                "exec",
                &ns.name,
                "ip",
                "addr",
                "add",
                &format!("10.{a}.{b}.2/24"),
                "dev",
                &inner_if,
            ],
            vec![
                "netns", "exec", &ns.name, "ip", "link", "set", &inner_if, "up",
            ],
            vec!["netns", "exec", &ns.name, "ip", "link", "set", "lo", "up"],
        ] {
            ip(&args).unwrap_or_else(|e| panic!("setting up {}: {e}", ns.name));
        }
        Some(ns)
    }

    /// `command` run inside the namespace (through `ip netns exec`), with its arguments and
    /// environment.
    pub fn command(&self, command: &Command) -> Command {
        let mut inside = Command::new("ip");
        inside
            .args(["netns", "exec", &self.name])
            .arg(command.get_program())
            .args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(v) => inside.env(key, v),
                None => inside.env_remove(key),
            };
        }
        inside
    }

    /// Puts the namespace behind NAT, as far as connections go: it connects out, but no
    /// connection from outside gets in (an opening TCP segment, SYN without ACK, arriving on
    /// the pair is dropped; nftables).
    pub fn refuse_incoming(&self) {
        let rules = "table inet corral_nat {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    iifname != \"lo\" tcp flags & (syn | ack) == syn drop\n  }\n}\n";
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("ip netns exec nft");
        use std::io::Write;
        nft.stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        assert!(nft.wait().unwrap().success(), "nft refused the rules");
    }

    /// Cuts the namespace off: the host's end goes down.
    pub fn cut(&self) {
        ip(&["link", "set", &self.host_if, "down"]).unwrap();
    }

    /// Joins it again.
    pub fn mend(&self) {
        ip(&["link", "set", &self.host_if, "up"]).unwrap();
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and so the pair.
        let _ = ip(&["netns", "del", &self.name]);
        let _ = ip(&["link", "del", &self.host_if]);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}
