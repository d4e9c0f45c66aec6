//! KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1): profiles, plugins enabled
//! or disabled per extension point (and multiPoint), score weights, and the arguments of
//! NodeResourcesFit (scoringStrategy) and InterPodAffinity (hardPodAffinityWeight).

use serde::Deserialize;

use crate::Error;
use crate::framework::{Filter, Profile, Score};
use crate::plugins::node_resources::{Scoring, Strategy};
use crate::plugins::{DEFAULT_PREEMPTION, SCHEDULING_GATES, topology_spread};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    pub profiles: Vec<ProfileConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileConfig {
    pub scheduler_name: Option<String>,
    pub percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    pub plugins: Plugins,
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plugins {
    #[serde(default)]
    pub multi_point: PluginSet,
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
    #[serde(default)]
    pub score: PluginSet,
    #[serde(default)]
    pub post_filter: PluginSet,
}

#[derive(Debug, Default, Deserialize)]
pub struct PluginSet {
    #[serde(default)]
    pub enabled: Vec<Plugin>,
    #[serde(default)]
    pub disabled: Vec<Plugin>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Plugin {
    pub name: String,
    pub weight: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct PluginConfig {
    pub name: String,
    #[serde(default)]
    pub args: serde_json::Value,
}

const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";

fn disabled(set: &PluginSet, name: &str) -> bool {
    set.disabled.iter().any(|p| p.name == name || p.name == "*")
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

impl Configuration {
    pub fn parse(text: &str) -> Result<Configuration, Error> {
        let config: Configuration = serde_yaml_ng::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if config.api_version != API_VERSION || config.kind != "KubeSchedulerConfiguration" {
            return Err(invalid(format!(
                "expected apiVersion {API_VERSION} and kind KubeSchedulerConfiguration, got {} {}",
                config.api_version, config.kind
            )));
        }
        Ok(config)
    }

    pub fn profiles(&self) -> Result<Vec<Profile>, Error> {
        if self.profiles.is_empty() {
            let mut p = Profile::new("default-scheduler");
            p.percentage_of_nodes_to_score = self.percentage_of_nodes_to_score.unwrap_or(0);
            return Ok(vec![p]);
        }
        let mut out: Vec<Profile> = Vec::new();
        for pc in &self.profiles {
            let name = pc.scheduler_name.clone().unwrap_or_else(|| "default-scheduler".into());
            if out.iter().any(|p| p.scheduler_name == name) {
                return Err(invalid(format!("profiles: duplicate schedulerName {name:?}")));
            }
            out.push(pc.profile(&name, self.percentage_of_nodes_to_score)?);
        }
        Ok(out)
    }
}

impl ProfileConfig {
    fn profile(&self, name: &str, global_percentage: Option<u32>) -> Result<Profile, Error> {
        let mut p = Profile::new(name);
        p.percentage_of_nodes_to_score = self.percentage_of_nodes_to_score.or(global_percentage).unwrap_or(0);
        if p.percentage_of_nodes_to_score > 100 {
            return Err(invalid("percentageOfNodesToScore: must be in the range [0, 100]"));
        }
        let pl = &self.plugins;
        let off = |set: &PluginSet, n: &str| disabled(&pl.multi_point, n) || disabled(set, n);
        p.filters.retain(|f| !off(&pl.filter, f.name()));
        p.scores.retain(|(s, _)| !off(&pl.score, s.name()));
        p.preemption = !off(&pl.post_filter, DEFAULT_PREEMPTION);
        p.scheduling_gates = !off(&pl.pre_enqueue, SCHEDULING_GATES);
        for enabled in pl.multi_point.enabled.iter().chain(&pl.filter.enabled) {
            if let Some(f) = Filter::DEFAULT.iter().find(|f| f.name() == enabled.name)
                && !p.filters.contains(f)
            {
                p.filters.push(*f);
            }
        }
        for enabled in pl.multi_point.enabled.iter().chain(&pl.score.enabled) {
            let Some((s, default_weight)) = Score::DEFAULT.iter().find(|(s, _)| s.name() == enabled.name) else {
                if !is_known(&enabled.name) {
                    return Err(invalid(format!("plugins: unknown plugin {:?}", enabled.name)));
                }
                continue;
            };
            let weight = enabled.weight.unwrap_or(*default_weight);
            if !(0..=100).contains(&weight) {
                return Err(invalid(format!(
                    "plugins.score.enabled[{}].weight: must be in the range [0, 100]",
                    enabled.name
                )));
            }
            match p.scores.iter_mut().find(|(x, _)| x == s) {
                Some(existing) => existing.1 = weight,
                None => p.scores.push((*s, weight)),
            }
        }
        for pc in &self.plugin_config {
            match pc.name.as_str() {
                "NodeResourcesFit" => p.scoring = scoring(&pc.args)?,
                "InterPodAffinity" => {
                    if let Some(w) = pc.args.get("hardPodAffinityWeight").and_then(|w| w.as_i64()) {
                        if !(0..=100).contains(&w) {
                            return Err(invalid("hardPodAffinityWeight: must be in the range [0, 100]"));
                        }
                        p.hard_pod_affinity_weight = w;
                    }
                }
                "PodTopologySpread" => p.spread_defaults = spread_defaults(&pc.args)?,
                _ => {}
            }
        }
        Ok(p)
    }
}

fn is_known(name: &str) -> bool {
    const OTHERS: &[&str] = &[
        "PrioritySort",
        "DefaultBinder",
        "DefaultPreemption",
        "SchedulingGates",
        "VolumeBinding",
        "VolumeRestrictions",
        "VolumeZone",
        "NodeVolumeLimits",
        "EBSLimits",
        "GCEPDLimits",
        "AzureDiskLimits",
        "DynamicResources",
        "NodeDeclaredFeatures",
    ];
    OTHERS.contains(&name)
        || Filter::DEFAULT.iter().any(|f| f.name() == name)
        || Score::DEFAULT.iter().any(|(s, _)| s.name() == name)
}

/// PodTopologySpreadArgs: defaultingType System (upstream's defaults, no list allowed)
/// or List (the given defaultConstraints, without selectors, each key and action once).
fn spread_defaults(args: &serde_json::Value) -> Result<topology_spread::Defaults, Error> {
    let list = args.get("defaultConstraints").and_then(|c| c.as_array()).cloned().unwrap_or_default();
    match args.get("defaultingType").and_then(|t| t.as_str()).unwrap_or("System") {
        "System" if list.is_empty() => Ok(topology_spread::Defaults::default()),
        "System" => Err(invalid("defaultConstraints: Invalid value: when .defaultingType is \"System\"")),
        "List" => {
            let mut constraints: Vec<topology_spread::DefaultConstraint> = Vec::new();
            for (i, c) in list.iter().enumerate() {
                let field = format!("defaultConstraints[{i}]");
                let max_skew = c.get("maxSkew").and_then(|m| m.as_i64()).unwrap_or(0);
                if max_skew <= 0 {
                    return Err(invalid(format!(
                        "{field}.maxSkew: Invalid value: {max_skew}: must be greater than zero"
                    )));
                }
                let key = c.get("topologyKey").and_then(|k| k.as_str()).unwrap_or("");
                if key.is_empty() {
                    return Err(invalid(format!("{field}.topologyKey: Required value: can not be empty")));
                }
                let when = c.get("whenUnsatisfiable").and_then(|w| w.as_str()).unwrap_or("");
                if !matches!(when, "DoNotSchedule" | "ScheduleAnyway") {
                    return Err(invalid(format!(
                        "{field}.whenUnsatisfiable: Unsupported value: \"{when}\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\""
                    )));
                }
                if c.get("labelSelector").is_some() {
                    return Err(invalid(format!(
                        "{field}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"
                    )));
                }
                if constraints.iter().any(|d| d.topology_key == key && d.when_unsatisfiable == when) {
                    return Err(invalid(format!("{field}: Duplicate value: \"{{{key}, {when}}}\"")));
                }
                constraints.push(topology_spread::DefaultConstraint {
                    max_skew,
                    topology_key: key.to_string(),
                    when_unsatisfiable: when.to_string(),
                });
            }
            Ok(topology_spread::Defaults { constraints, system: false })
        }
        other => Err(invalid(format!(
            "defaultingType: Unsupported value: \"{other}\": supported values: \"List\", \"System\""
        ))),
    }
}

fn scoring(args: &serde_json::Value) -> Result<Scoring, Error> {
    let mut scoring = Scoring::default();
    let Some(strategy) = args.get("scoringStrategy") else { return Ok(scoring) };
    if let Some(resources) = strategy.get("resources").and_then(|r| r.as_array()) {
        scoring.resources = resources
            .iter()
            .map(|r| {
                let name = r.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
                (name, r.get("weight").and_then(|w| w.as_i64()).unwrap_or(1))
            })
            .collect();
    }
    scoring.strategy = match strategy.get("type").and_then(|t| t.as_str()).unwrap_or("LeastAllocated") {
        "LeastAllocated" => Strategy::LeastAllocated,
        "MostAllocated" => Strategy::MostAllocated,
        "RequestedToCapacityRatio" => {
            let shape = strategy
                .pointer("/requestedToCapacityRatio/shape")
                .and_then(|s| s.as_array())
                .ok_or_else(|| invalid("scoringStrategy.requestedToCapacityRatio.shape: Required value"))?;
            let mut points: Vec<(i64, i64)> = shape
                .iter()
                .map(|p| {
                    (
                        p.get("utilization").and_then(|u| u.as_i64()).unwrap_or(0),
                        p.get("score").and_then(|s| s.as_i64()).unwrap_or(0),
                    )
                })
                .collect();
            if points.iter().any(|(u, s)| !(0..=100).contains(u) || !(0..=10).contains(s)) {
                return Err(invalid(
                    "scoringStrategy.requestedToCapacityRatio.shape: utilization must be in [0, 100] and score in [0, 10]",
                ));
            }
            points.sort();
            Strategy::RequestedToCapacityRatio(points)
        }
        other => return Err(invalid(format!("scoringStrategy.type: Unsupported value: {other:?}"))),
    };
    Ok(scoring)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_plugins_and_arguments() {
        let config = Configuration::parse(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: bin-packer
  plugins:
    score:
      disabled:
      - name: ImageLocality
      enabled:
      - name: TaintToleration
        weight: 7
    postFilter:
      disabled:
      - name: DefaultPreemption
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: cpu
          weight: 2
"#,
        )
        .unwrap();
        let profiles = config.profiles().unwrap();
        assert_eq!(profiles.len(), 2);
        assert_eq!(profiles[0].scores, Score::DEFAULT.to_vec());
        let packer = &profiles[1];
        assert_eq!(packer.scheduler_name, "bin-packer");
        assert!(!packer.scores.iter().any(|(s, _)| *s == Score::ImageLocality));
        assert!(packer.scores.contains(&(Score::TaintToleration, 7)));
        assert!(!packer.preemption);
        assert_eq!(packer.scoring.strategy, Strategy::MostAllocated);
        assert_eq!(packer.scoring.resources, vec![("cpu".to_string(), 2)]);
    }

    #[test]
    fn topology_spread_default_constraints() {
        let with = |args: &str| {
            let text = format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: s\n  pluginConfig:\n  - name: PodTopologySpread\n    args:\n{args}"
            );
            Configuration::parse(&text).and_then(|c| c.profiles()).map(|p| p[0].spread_defaults.clone())
        };
        assert_eq!(with("      defaultingType: System\n").unwrap(), topology_spread::Defaults::default());
        let list = with(
            "      defaultingType: List\n      defaultConstraints:\n      - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n",
        )
        .unwrap();
        assert!(!list.system);
        assert_eq!(list.constraints.len(), 1);
        assert_eq!((list.constraints[0].max_skew, list.constraints[0].topology_key.as_str()), (1, "zone"));
        let empty = with("      defaultingType: List\n").unwrap();
        assert!(empty.constraints.is_empty());
        for (args, message) in [
            (
                "      defaultConstraints:\n      - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n",
                "when .defaultingType is \"System\"",
            ),
            (
                "      defaultingType: List\n      defaultConstraints:\n      - {maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n",
                "must be greater than zero",
            ),
            (
                "      defaultingType: List\n      defaultConstraints:\n      - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}\n",
                "must not define a selector",
            ),
            ("      defaultingType: Other\n", "supported values: \"List\", \"System\""),
        ] {
            let err = with(args).unwrap_err().to_string();
            assert!(err.contains(message), "{args}: {err}");
        }
    }

    #[test]
    fn rejects_what_upstream_rejects() {
        assert!(Configuration::parse("apiVersion: v1\nkind: Pod\n").is_err());
        let bad = Configuration::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      enabled:\n      - name: NoSuchPlugin\n",
        )
        .unwrap();
        assert!(bad.profiles().is_err());
    }
}
