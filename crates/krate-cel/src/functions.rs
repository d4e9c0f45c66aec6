//! The function environment: the CEL standard library, Kubernetes' libraries
//! (kube-cel) and the helpers the rewrites in `compile` call.

use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::KubeCelExt;
use kube_cel::cel::objects::{Key, Map, OptionalValue};
use kube_cel::cel::{Context, ExecutionError, ResolveResult, Value};

/// A root context holding only functions; evaluations add their variables in an
/// inner scope, so the (large) function table is built once per thread.
pub(crate) fn root() -> Context<'static> {
    let mut ctx = Context::default().with_all();
    ctx.add_function("__pairs__", pairs);
    ctx.add_function("__entries_to_map__", entries_to_map);
    ctx.add_function("__opt_select__", opt_select);
    // Types as values: `type(x)` names the type, and the type identifiers are
    // bound to the same names, so `type(x) == int` holds (the interpreter has no
    // type values of its own).
    ctx.add_function("type", type_of);
    for name in crate::compile::TYPE_IDENTS {
        ctx.add_variable_from_value(*name, *name);
    }
    ctx
}

fn type_of(v: Value) -> ResolveResult {
    Ok(Value::String(Arc::new(crate::Output(v).kind().name().to_string())))
}

/// `a.?f`: an optional of the field when `a` (or the optional `a` holds) has it,
/// `optional.none()` otherwise.
fn opt_select(operand: Value, field: Arc<String>) -> ResolveResult {
    let operand = match &operand {
        Value::Opaque(o) => match o.downcast_ref::<OptionalValue>() {
            Some(opt) => match opt.value() {
                Some(v) => v.clone(),
                None => return Ok(Value::Opaque(Arc::new(OptionalValue::none()))),
            },
            None => return Err(ExecutionError::NoSuchOverload),
        },
        other => other.clone(),
    };
    match operand {
        Value::Map(m) => Ok(Value::Opaque(Arc::new(match m.map.get(&Key::String(field)) {
            Some(v) => OptionalValue::of(v.clone()),
            None => OptionalValue::none(),
        }))),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

/// `[[index, value], ..]` of a list or `[[key, value], ..]` of a map: what
/// two-variable comprehensions iterate.
fn pairs(target: Value) -> ResolveResult {
    let out: Vec<Value> = match target {
        Value::List(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| Value::List(Arc::new(vec![Value::Int(i as i64), v.clone()])))
            .collect(),
        Value::Map(m) => {
            let mut entries: Vec<(&Key, &Value)> = m.map.iter().collect();
            // Deterministic order for transformList over maps and for errors.
            entries.sort_by(|a, b| a.0.cmp(b.0));
            entries.into_iter().map(|(k, v)| Value::List(Arc::new(vec![Value::from(k), v.clone()]))).collect()
        }
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    Ok(Value::List(Arc::new(out)))
}

/// The map of `[key, value]` entries (transformMap's result).
fn entries_to_map(entries: Arc<Vec<Value>>) -> ResolveResult {
    let mut map = HashMap::with_capacity(entries.len());
    for e in entries.iter() {
        let Value::List(kv) = e else { return Err(ExecutionError::NoSuchOverload) };
        let (Some(k), Some(v)) = (kv.first(), kv.get(1)) else {
            return Err(ExecutionError::NoSuchOverload);
        };
        let key: Key = k.clone().try_into().map_err(|_| ExecutionError::UnsupportedKeyType(k.clone()))?;
        map.insert(key, v.clone());
    }
    Ok(Value::Map(Map { map: Arc::new(map) }))
}
