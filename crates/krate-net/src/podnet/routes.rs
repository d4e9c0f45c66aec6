//! Running `ip`: listing our routes, replacing and deleting them one
//! at a time, so one unreachable node fails alone.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use super::plan::KernelRoutes;
use crate::command::{CommandError, run};
use crate::proxy::Ipv4Cidr;

/// `ip` with its prefix, programming IPv4 routes of one protocol in the main table.
#[derive(Clone, Debug)]
pub struct Routes {
    command: Vec<String>,
    protocol: String,
    timeout: Duration,
}

#[derive(serde::Deserialize)]
struct Listed {
    dst: String,
    #[serde(default)]
    gateway: Option<String>,
}

impl Routes {
    pub fn new(command: Vec<String>, protocol: u8, timeout: Duration) -> Routes {
        Routes { command, protocol: protocol.to_string(), timeout }
    }

    async fn list_json(&self, ours_only: bool) -> Result<Vec<Listed>, CommandError> {
        let mut args = vec!["-4", "-j", "route", "show", "table", "main"];
        if ours_only {
            args.extend(["proto", self.protocol.as_str()]);
        }
        let out = run(&self.command, &args, None, self.timeout).await?;
        if out.trim().is_empty() {
            return Ok(Vec::new());
        }
        serde_json::from_str(&out).map_err(|e| CommandError::Parse {
            command: format!("{} {}", self.command.join(" "), args.join(" ")),
            error: e.to_string(),
        })
    }

    /// Our routes, and which destinations other routes take.
    pub async fn list(&self) -> Result<KernelRoutes, CommandError> {
        let ours = self.list_json(true).await?;
        let all = self.list_json(false).await?;
        Ok(kernel_routes(&ours, &all))
    }

    /// `ip route replace CIDR via GATEWAY proto N`: fails when the gateway is not on a
    /// directly connected network (host-gw needs the nodes on one L2 segment).
    pub async fn replace(&self, cidr: Ipv4Cidr, gateway: Ipv4Addr) -> Result<(), CommandError> {
        let (cidr, gateway) = (cidr.to_string(), gateway.to_string());
        let args = ["-4", "route", "replace", &cidr, "via", &gateway, "proto", &self.protocol, "table", "main"];
        run(&self.command, &args, None, self.timeout).await.map(drop)
    }

    /// Deletes our route to `cidr` (only ours: the protocol is part of the match); one
    /// that is gone already is no error.
    pub async fn delete(&self, cidr: Ipv4Cidr) -> Result<(), CommandError> {
        let cidr = cidr.to_string();
        let args = ["-4", "route", "del", &cidr, "proto", &self.protocol, "table", "main"];
        match run(&self.command, &args, None, self.timeout).await {
            Err(e) if e.stderr().is_some_and(|s| s.contains("No such process")) => Ok(()),
            other => other.map(drop),
        }
    }

    /// Deletes every route of ours, giving how many there were.
    pub async fn delete_all(&self) -> Result<usize, CommandError> {
        let ours = self.list().await?.ours;
        for cidr in ours.keys() {
            self.delete(*cidr).await?;
        }
        Ok(ours.len())
    }
}

fn parse_dst(dst: &str) -> Option<Ipv4Cidr> {
    match dst {
        "default" => "0.0.0.0/0".parse().ok(),
        dst => dst.parse().ok(),
    }
}

/// Ours are the routes the protocol-filtered listing shows; a destination is foreign
/// when the full listing has more routes to it than that.
fn kernel_routes(ours: &[Listed], all: &[Listed]) -> KernelRoutes {
    let mut out = KernelRoutes::default();
    let mut counts: BTreeMap<Ipv4Cidr, isize> = BTreeMap::new();
    for route in ours {
        if let Some(dst) = parse_dst(&route.dst) {
            out.ours.insert(dst, route.gateway.as_deref().and_then(|g| g.parse().ok()));
            *counts.entry(dst).or_default() -= 1;
        }
    }
    for route in all {
        if let Some(dst) = parse_dst(&route.dst) {
            *counts.entry(dst).or_default() += 1;
        }
    }
    out.foreign = counts.into_iter().filter(|(_, n)| *n > 0).map(|(c, _)| c).collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_split_ours_from_foreign() {
        let ours: Vec<Listed> =
            serde_json::from_str(r#"[{"dst":"10.42.1.0/24","gateway":"172.31.255.2","dev":"h","flags":[]}]"#).unwrap();
        let all: Vec<Listed> = serde_json::from_str(
            r#"[{"dst":"default","gateway":"192.0.2.1","dev":"e","flags":[]},
                {"dst":"10.42.1.0/24","gateway":"172.31.255.2","dev":"h","protocol":"75","flags":[]},
                {"dst":"10.42.2.0/24","dev":"h","protocol":"static","flags":[]},
                {"dst":"172.31.255.0/30","dev":"h","protocol":"kernel","scope":"link","flags":[]}]"#,
        )
        .unwrap();
        let kernel = kernel_routes(&ours, &all);
        let cidr = |s: &str| s.parse::<Ipv4Cidr>().unwrap();
        assert_eq!(kernel.ours, [(cidr("10.42.1.0/24"), Some("172.31.255.2".parse().unwrap()))].into());
        assert_eq!(kernel.foreign, [cidr("0.0.0.0/0"), cidr("10.42.2.0/24"), cidr("172.31.255.0/30")].into());
    }
}
