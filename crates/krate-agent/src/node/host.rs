//! Facts about this machine the Node reports: capacity (cpu, memory, hugepages from
//! /proc, ephemeral-storage from statvfs of the data dir), what is free (for the
//! pressure conditions), and nodeInfo's identity fields. Parsing is pure and
//! unit-tested; reading happens off the async workers.

use std::collections::BTreeMap;
use std::path::Path;

/// Upstream's default --max-pods.
pub const MAX_PODS: u64 = 110;
/// Upstream's default hard eviction thresholds, subtracted from capacity to make
/// allocatable and used for the pressure conditions: memory.available<100Mi,
/// nodefs.available<10%.
pub const EVICTION_MEMORY_BYTES: u64 = 100 * 1024 * 1024;
pub const EVICTION_NODEFS_PERCENT: u64 = 10;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    pub total: u64,
    pub available: u64,
    /// (page size in bytes, pages) of the default hugepage size.
    pub hugepages: Option<(u64, u64)>,
}

/// /proc/meminfo: MemTotal, MemAvailable and the default hugepages, in bytes.
pub fn parse_meminfo(text: &str) -> Memory {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else { continue };
        let mut words = rest.split_whitespace();
        let Some(n) = words.next().and_then(|n| n.parse::<u64>().ok()) else { continue };
        let bytes = if words.next() == Some("kB") { n * 1024 } else { n };
        fields.insert(key.trim().to_string(), bytes);
    }
    let total = fields.get("MemTotal").copied().unwrap_or(0);
    let hugepages = match (fields.get("Hugepagesize"), fields.get("HugePages_Total")) {
        (Some(size), Some(pages)) if *size > 0 => Some((*size, *pages)),
        _ => None,
    };
    Memory { total, available: fields.get("MemAvailable").copied().unwrap_or(total), hugepages }
}

/// Online logical CPUs from /sys/devices/system/cpu/online ("0-3,6").
pub fn parse_cpu_list(text: &str) -> u64 {
    text.trim()
        .split(',')
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 0,
            },
            None => u64::from(r.parse::<u64>().is_ok()),
        })
        .sum()
}

/// Bytes as a Kubernetes quantity: `NKi` when a whole number of KiB (as the kubelet
/// prints memory), else plain bytes.
pub fn bytes_quantity(bytes: u64) -> String {
    if bytes > 0 && bytes.is_multiple_of(1024) { format!("{}Ki", bytes / 1024) } else { bytes.to_string() }
}

/// Hugepage resource name of a page size: hugepages-2Mi, hugepages-1Gi.
pub fn hugepage_resource(size: u64) -> String {
    const GI: u64 = 1 << 30;
    const MI: u64 = 1 << 20;
    if size.is_multiple_of(GI) {
        format!("hugepages-{}Gi", size / GI)
    } else if size.is_multiple_of(MI) {
        format!("hugepages-{}Mi", size / MI)
    } else {
        format!("hugepages-{}Ki", size / 1024)
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filesystem {
    pub total: u64,
    pub available: u64,
}

/// The filesystem holding `path` (statvfs).
pub fn filesystem(path: &Path) -> std::io::Result<Filesystem> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `s` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let block = s.f_frsize as u64;
    Ok(Filesystem { total: s.f_blocks as u64 * block, available: s.f_bavail as u64 * block })
}

/// What the node has and what is free right now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resources {
    pub cpus: u64,
    pub memory: Memory,
    pub storage: Filesystem,
    /// (processes running, pid_max).
    pub pids: (u64, u64),
}

impl Resources {
    /// Reads /proc, /sys and statvfs (blocking).
    pub fn read(data_dir: &Path) -> Resources {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpus = match parse_cpu_list(&read("/sys/devices/system/cpu/online")) {
            0 => std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1),
            n => n,
        };
        let pid_max = read("/proc/sys/kernel/pid_max").trim().parse().unwrap_or(32768);
        let running = std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten().filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit())).count()
            })
            .unwrap_or(0) as u64;
        Resources {
            cpus,
            memory: parse_meminfo(&read("/proc/meminfo")),
            storage: filesystem(data_dir).unwrap_or_default(),
            pids: (running, pid_max),
        }
    }

    /// status.capacity.
    pub fn capacity(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        out.insert("cpu".into(), self.cpus.to_string());
        out.insert("memory".into(), bytes_quantity(self.memory.total));
        out.insert("ephemeral-storage".into(), bytes_quantity(self.storage.total));
        out.insert("pods".into(), MAX_PODS.to_string());
        if let Some((size, pages)) = self.memory.hugepages {
            out.insert(hugepage_resource(size), bytes_quantity(size * pages));
        }
        out
    }

    /// status.allocatable: capacity less the hard eviction thresholds (no kube- or
    /// system-reserved by default, as upstream) and hugepages for memory.
    pub fn allocatable(&self) -> BTreeMap<String, String> {
        let mut out = self.capacity();
        let huge = self.memory.hugepages.map(|(s, p)| s * p).unwrap_or(0);
        let memory = self.memory.total.saturating_sub(EVICTION_MEMORY_BYTES).saturating_sub(huge);
        out.insert("memory".into(), bytes_quantity(memory));
        let storage = self.storage.total - self.storage.total * EVICTION_NODEFS_PERCENT / 100;
        out.insert("ephemeral-storage".into(), bytes_quantity(storage));
        out
    }

    pub fn memory_pressure(&self) -> bool {
        self.memory.total > 0 && self.memory.available < EVICTION_MEMORY_BYTES
    }

    pub fn disk_pressure(&self) -> bool {
        self.storage.total > 0 && self.storage.available * 100 < self.storage.total * EVICTION_NODEFS_PERCENT
    }

    /// Upstream sets no default PID threshold; like its eviction manager we call it
    /// pressure when fewer than 10% of pid_max are left.
    pub fn pid_pressure(&self) -> bool {
        let (running, max) = self.pids;
        max > 0 && running * 10 > max * 9
    }
}

/// nodeInfo's identity fields.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Identity {
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
}

/// PRETTY_NAME of /etc/os-release ("Debian GNU/Linux 12 (bookworm)").
pub fn parse_os_release(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim().trim_matches('"').to_string())
}

impl Identity {
    pub fn read() -> Identity {
        let first = |paths: &[&str]| {
            paths
                .iter()
                .find_map(|p| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()))
        };
        Identity {
            machine_id: first(&["/etc/machine-id", "/var/lib/dbus/machine-id"]).unwrap_or_default(),
            system_uuid: first(&["/sys/class/dmi/id/product_uuid"]).unwrap_or_default(),
            boot_id: first(&["/proc/sys/kernel/random/boot_id"]).unwrap_or_default(),
            kernel_version: first(&["/proc/sys/kernel/osrelease"]).unwrap_or_default(),
            os_image: std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|t| parse_os_release(&t))
                .unwrap_or_else(|| "Linux".into()),
        }
    }
}

/// Go's GOARCH for this build (what nodeInfo.architecture and kubernetes.io/arch say).
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       16384000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\nHugePages_Total:       4\nHugePages_Free:        4\nHugepagesize:       2048 kB\n";

    #[test]
    fn meminfo_gives_total_available_and_hugepages_in_bytes() {
        let m = parse_meminfo(MEMINFO);
        assert_eq!(m.total, 16384000 * 1024);
        assert_eq!(m.available, 8000000 * 1024);
        assert_eq!(m.hugepages, Some((2048 * 1024, 4)));
        assert_eq!(parse_meminfo("garbage\nMemTotal: x kB"), Memory::default());
    }

    #[test]
    fn cpu_lists_count_online_cpus() {
        assert_eq!(parse_cpu_list("0-3\n"), 4);
        assert_eq!(parse_cpu_list("0-3,6,8-9"), 7);
        assert_eq!(parse_cpu_list("0"), 1);
        assert_eq!(parse_cpu_list(""), 0);
        assert_eq!(parse_cpu_list("3-1"), 0);
    }

    #[test]
    fn capacity_and_allocatable_follow_the_kubelet() {
        let r = Resources {
            cpus: 2,
            memory: parse_meminfo(MEMINFO),
            storage: Filesystem { total: 100 * 1024 * 1024 * 1024, available: 50 * 1024 * 1024 * 1024 },
            pids: (100, 32768),
        };
        let c = r.capacity();
        assert_eq!(c["cpu"], "2");
        assert_eq!(c["memory"], "16384000Ki");
        assert_eq!(c["ephemeral-storage"], "104857600Ki");
        assert_eq!(c["pods"], "110");
        assert_eq!(c["hugepages-2Mi"], "8192Ki");
        let a = r.allocatable();
        // 100Mi and the hugepages' 8Mi less memory, 10% less storage.
        assert_eq!(a["memory"], format!("{}Ki", 16384000 - 102400 - 8192));
        assert_eq!(a["ephemeral-storage"], "94371840Ki");
        assert!(!r.memory_pressure() && !r.disk_pressure() && !r.pid_pressure());
        let tight = Resources {
            memory: Memory { total: 1 << 30, available: 50 << 20, hugepages: None },
            storage: Filesystem { total: 1000, available: 99 },
            pids: (30000, 32768),
            ..r
        };
        assert!(tight.memory_pressure() && tight.disk_pressure() && tight.pid_pressure());
    }

    #[test]
    fn quantities_and_names_are_the_kubelets() {
        assert_eq!(bytes_quantity(2048), "2Ki");
        assert_eq!(bytes_quantity(1000), "1000");
        assert_eq!(bytes_quantity(0), "0");
        assert_eq!(hugepage_resource(2 << 20), "hugepages-2Mi");
        assert_eq!(hugepage_resource(1 << 30), "hugepages-1Gi");
        assert_eq!(
            parse_os_release("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }
}
