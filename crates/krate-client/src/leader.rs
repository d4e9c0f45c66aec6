//! Leader election on a coordination.k8s.io Lease, with client-go's rules: a candidate
//! takes the Lease only when it is free or its holder has not renewed it for a whole
//! lease duration *as this candidate observed* (local clocks, so skew between machines
//! does not matter); the leader renews every retry period and steps down when it has
//! not renewed within the renew deadline — before anyone else may take over, since the
//! deadline is shorter than the duration. Several `krate server` processes on one etcd
//! thereby never run the same controllers at once, and one takes over within about a
//! lease duration when the leader dies.
//!
//! Unlike upstream's components, which exit when they lose the lease, a krate server
//! also serves the API: losing leadership stops only the led work, which starts again
//! from scratch if leadership comes back.

use std::future::Future;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use prometheus::{IntGaugeVec, register_int_gauge_vec};

static LEADING: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "leader_election_master_status",
        "1 while this process holds the named lease (upstream's metric name).",
        &["name"]
    )
    .expect("metric registers once")
});

/// Which lease, who we are, and client-go's timings (defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Config {
    /// A lease in kube-system (as kube-controller-manager's and kube-scheduler's are),
    /// held as `<host>_<random>` so two processes on one host differ.
    pub fn new(name: &str) -> Config {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim();
        Config {
            namespace: "kube-system".into(),
            name: name.into(),
            identity: format!("{}_{:016x}", if host.is_empty() { "krate" } else { host }, rand::random::<u64>()),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What this candidate saw of the lease last: its record and when (locally) it changed.
struct Observed {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    duration: Duration,
    at: Instant,
}

/// Runs `lead()` whenever this process holds the lease, for as long as it does;
/// forever (until dropped).
pub async fn run<F, Fut>(client: kube::Client, config: Config, lead: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let leases: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut observed: Option<Observed> = None;
    loop {
        match try_acquire_or_renew(&leases, &config, &mut observed).await {
            Ok(true) => {}
            Ok(false) => {
                tokio::time::sleep(jittered(config.retry_period)).await;
                continue;
            }
            Err(error) => {
                tracing::warn!(lease = %config.name, %error, "leader election: lease unreachable");
                tokio::time::sleep(jittered(config.retry_period)).await;
                continue;
            }
        }
        tracing::info!(lease = %config.name, identity = %config.identity, "became leader");
        LEADING.with_label_values(&[&config.name]).set(1);
        let work = AbortOnDrop(tokio::spawn(lead()));
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(config.retry_period).await;
            match try_acquire_or_renew(&leases, &config, &mut observed).await {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => break,
                Err(error) => {
                    tracing::warn!(lease = %config.name, %error, "leader election: renewal failed");
                    if renewed.elapsed() >= config.renew_deadline {
                        break;
                    }
                }
            }
        }
        drop(work);
        LEADING.with_label_values(&[&config.name]).set(0);
        tracing::warn!(lease = %config.name, identity = %config.identity, "leadership lost; led work stopped");
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// client-go waits retry period × (1 + up to 1.2) between tries, so candidates spread out.
fn jittered(period: Duration) -> Duration {
    period.mul_f64(1.0 + rand::random::<f64>() * 1.2)
}

/// One step of the election: Ok(true) when we hold the lease after it.
async fn try_acquire_or_renew(
    leases: &Api<Lease>,
    config: &Config,
    observed: &mut Option<Observed>,
) -> Result<bool, kube::Error> {
    let now = MicroTime(Timestamp::now());
    let Some(mut lease) = leases.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta { name: Some(config.name.clone()), ..Default::default() },
            spec: Some(record(config, now.clone(), now.clone(), 0)),
        };
        return match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
    let changed = observed
        .as_ref()
        .is_none_or(|o| o.holder != holder || o.renew_time != spec.renew_time || o.duration != duration);
    if changed {
        *observed = Some(Observed {
            holder: holder.clone(),
            renew_time: spec.renew_time.clone(),
            duration,
            at: Instant::now(),
        });
    }
    let ours = holder.as_deref() == Some(config.identity.as_str());
    let seen = observed.as_ref().expect("set above");
    if !ours && holder.is_some() && seen.at.elapsed() < seen.duration {
        return Ok(false);
    }
    let (acquired, transitions) = if ours {
        (spec.acquire_time.clone().unwrap_or(now.clone()), spec.lease_transitions.unwrap_or(0))
    } else {
        (now.clone(), spec.lease_transitions.unwrap_or(0) + 1)
    };
    lease.spec = Some(record(config, acquired, now, transitions));
    // The resourceVersion from our read makes this a compare-and-swap.
    match leases.replace(&config.name, &PostParams::default(), &lease).await {
        Ok(written) => {
            let spec = written.spec.unwrap_or_default();
            *observed = Some(Observed {
                holder: spec.holder_identity,
                renew_time: spec.renew_time,
                duration: config.lease_duration,
                at: Instant::now(),
            });
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

fn record(config: &Config, acquired: MicroTime, renewed: MicroTime, transitions: i32) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.lease_duration.as_secs() as i32),
        acquire_time: Some(acquired),
        renew_time: Some(renewed),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}
