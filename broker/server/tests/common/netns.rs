//! Network namespaces for partition tests: a bridge in the test's own namespace and one
//! namespace per host on it, each host with its own address, so the processes of a test
//! reach each other over real TCP between real interfaces. A partition is a pair of nftables
//! rules in one host's namespace that silently drop its traffic with chosen peers (no RST,
//! no ICMP: the peers' packets vanish, as on a cut link), while every other path keeps
//! working. Needs CAP_NET_ADMIN (root); [`Lab::create`] says why when it cannot.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

/// One host of a [`Lab`].
#[derive(Debug, Clone)]
pub struct Host {
    /// Its network namespace.
    pub netns: String,
    /// Its address on the lab's bridge.
    pub ip: IpAddr,
}

/// The bridge and its hosts; everything is removed when dropped.
pub struct Lab {
    /// Prefix of every name (bridge, namespaces, interfaces), unique to this process.
    tag: String,
    /// The first three octets of the lab's /24.
    subnet: [u8; 3],
    /// The hosts, in creation order.
    hosts: Vec<Host>,
}

/// Runs `ip`/`nft` with `args`; the error names the command and what it printed.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// `nft ARGS` inside `host`'s namespace.
fn nft(host: &Host, args: &[&str]) -> Result<(), String> {
    let mut all = vec!["netns", "exec", host.netns.as_str(), "nft"];
    all.extend_from_slice(args);
    run("ip", &all)
}

impl Lab {
    /// A bridge with `hosts` namespaces on it.
    pub fn create(hosts: usize) -> Result<Lab, String> {
        let pid = std::process::id();
        let tag = format!("cv{}", pid % 100_000);
        let subnet = [10, 251, (pid % 250) as u8];
        let mut lab = Lab {
            tag,
            subnet,
            hosts: Vec::new(),
        };
        lab.remove(hosts); // leftovers of an earlier process with the same pid
        let bridge = lab.bridge();
        let gateway = format!("{}/24", lab.gateway());
        run("ip", &["link", "add", &bridge, "type", "bridge"])?;
        run("ip", &["addr", "add", &gateway, "dev", &bridge])?;
        run("ip", &["link", "set", &bridge, "up"])?;
        for i in 0..hosts {
            let netns = format!("{}h{i}", lab.tag);
            let outside = format!("{}v{i}", lab.tag);
            let ip = Ipv4Addr::new(subnet[0], subnet[1], subnet[2], 2 + i as u8);
            run("ip", &["netns", "add", &netns])?;
            lab.hosts.push(Host {
                netns: netns.clone(),
                ip: IpAddr::V4(ip),
            });
            run(
                "ip",
                &[
                    "link", "add", &outside, "type", "veth", "peer", "name", "eth0", "netns",
                    &netns,
                ],
            )?;
            run("ip", &["link", "set", &outside, "master", &bridge, "up"])?;
            run("ip", &["-n", &netns, "link", "set", "lo", "up"])?;
            run(
                "ip",
                &[
                    "-n",
                    &netns,
                    "addr",
                    "add",
                    &format!("{ip}/24"),
                    "dev",
                    "eth0",
                ],
            )?;
            run("ip", &["-n", &netns, "link", "set", "eth0", "up"])?;
        }
        Ok(lab)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    /// The test's own address on the bridge.
    pub fn gateway(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(
            self.subnet[0],
            self.subnet[1],
            self.subnet[2],
            1,
        ))
    }

    /// Host `i`.
    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    /// Drops every packet between `host` and `peers`, both ways, from now on.
    pub fn cut(&self, host: &Host, peers: &[IpAddr]) {
        let set = peers
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let rules = format!(
            "table inet partition {{\n\
             chain in {{ type filter hook input priority 0; policy accept; ip saddr {{ {set} }} drop; }}\n\
             chain out {{ type filter hook output priority 0; policy accept; ip daddr {{ {set} }} drop; }}\n\
             }}\n"
        );
        let file = std::env::temp_dir().join(format!("{}-{}.nft", self.tag, host.netns));
        std::fs::write(&file, rules).expect("nft rules file");
        nft(host, &["-f", &file.to_string_lossy()]).expect("cut");
        let _ = std::fs::remove_file(file);
    }

    /// Undoes [`Lab::cut`] on `host`.
    pub fn heal(&self, host: &Host) {
        nft(host, &["delete", "table", "inet", "partition"]).expect("heal");
    }

    /// Removes the namespaces of `hosts` hosts and the bridge, ignoring what is not there.
    fn remove(&self, hosts: usize) {
        for i in 0..hosts {
            let _ = run("ip", &["netns", "del", &format!("{}h{i}", self.tag)]);
            let _ = run("ip", &["link", "del", &format!("{}v{i}", self.tag)]);
        }
        let _ = run("ip", &["link", "del", &self.bridge()]);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.remove(self.hosts.len());
    }
}
