//! The pod network the agent's own containerd uses: a bridge with host-local IPAM over
//! the node's pod CIDR, and portmap for hostPorts (containerd adds loopback itself).

use std::path::Path;

/// The conflist for `cidr` on bridge `bridge`, keeping IPAM state under `ipam_dir`.
pub fn conflist(bridge: &str, cidr: &str, ipam_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "krate",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": cidr }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": ipam_dir,
                },
            },
            { "type": "portmap", "capabilities": { "portMappings": true } },
        ],
    })
    .to_string()
}

/// Writes the conflist atomically (containerd watches the directory and may read it
/// at any moment).
pub async fn write(conf_dir: &Path, bridge: &str, cidr: &str, ipam_dir: &Path) -> std::io::Result<()> {
    tokio::fs::create_dir_all(conf_dir).await?;
    let tmp = conf_dir.join(".10-krate.conflist.tmp");
    tokio::fs::write(&tmp, conflist(bridge, cidr, ipam_dir)).await?;
    tokio::fs::rename(&tmp, conf_dir.join("10-krate.conflist")).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflist_names_bridge_subnet_and_ipam_dir() {
        let v: serde_json::Value =
            serde_json::from_str(&conflist("kr0", "10.42.0.0/24", Path::new("/d/ipam"))).unwrap();
        assert_eq!(v["plugins"][0]["bridge"], "kr0");
        assert_eq!(v["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], "10.42.0.0/24");
        assert_eq!(v["plugins"][0]["ipam"]["dataDir"], "/d/ipam");
        assert_eq!(v["plugins"][1]["type"], "portmap");
    }
}
