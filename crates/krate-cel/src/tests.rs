//! Expressions as Kubernetes uses them, through the public API.

use serde_json::json;

use crate::rule::{Outcome, Rule, compile_rule};
use crate::{Activation, CostBudget, EvalError, ValueKind, compile};

fn eval(src: &str, obj: serde_json::Value) -> Result<serde_json::Value, EvalError> {
    let program = compile(src, &["self", "object"]).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    let act = Activation::new().with("self", &obj).with("object", &obj);
    program.evaluate(&act, &mut CostBudget::default()).map(|o| o.to_json().expect("json result"))
}

fn truthy(src: &str, obj: serde_json::Value) {
    assert_eq!(eval(src, obj).unwrap_or_else(|e| panic!("{src}: {e}")), json!(true), "{src}");
}

#[test]
fn basic_expressions_and_macros() {
    let obj = json!({"spec": {"replicas": 3, "items": [1, 2, 3], "labels": {"a": "x", "b": "y"}}});
    truthy("self.spec.replicas > 2 && self.spec.replicas <= 3", obj.clone());
    truthy("self.spec.items.all(i, i > 0)", obj.clone());
    truthy("self.spec.items.exists(i, i == 2)", obj.clone());
    truthy("self.spec.items.exists_one(i, i == 2)", obj.clone());
    truthy("self.spec.items.map(i, i * 2) == [2, 4, 6]", obj.clone());
    truthy("self.spec.items.filter(i, i > 1).size() == 2", obj.clone());
    truthy("has(self.spec.labels) && !has(self.spec.missing)", obj.clone());
    truthy("'a' in self.spec.labels", obj.clone());
    truthy("self.spec.labels.all(k, self.spec.labels[k].size() == 1)", obj.clone());
    truthy("type(self.spec.replicas) == int", obj);
}

#[test]
fn bind_and_two_variable_comprehensions() {
    let obj = json!({"items": ["a", "bb", "ccc"], "m": {"x": 1, "y": 2}});
    truthy("cel.bind(n, self.items.size(), n * n == 9)", obj.clone());
    truthy("cel.bind(a, 1, cel.bind(b, a + 1, a + b == 3))", obj.clone());
    truthy("self.items.all(i, v, v.size() == i + 1)", obj.clone());
    truthy("self.items.exists(i, v, i == 1 && v == 'bb')", obj.clone());
    truthy("self.m.all(k, v, v > 0 && k.size() == 1)", obj.clone());
    truthy("self.items.transformList(i, v, v + string(i)) == ['a0', 'bb1', 'ccc2']", obj.clone());
    truthy("self.items.transformList(i, v, i > 0, v) == ['bb', 'ccc']", obj.clone());
    truthy("self.m.transformMap(k, v, v * 10) == {'x': 10, 'y': 20}", obj.clone());
    truthy("self.m.transformMap(k, v, v > 1, v) == {'y': 2}", obj);
}

#[test]
fn optionals() {
    let obj = json!({"spec": {"a": {"b": "set"}}});
    truthy("self.spec.?a.?b.orValue('none') == 'set'", obj.clone());
    truthy("self.spec.?missing.?b.orValue('none') == 'none'", obj.clone());
    truthy("!self.spec.?missing.hasValue()", obj.clone());
    truthy("optional.of(1).value() == 1", obj.clone());
    truthy("self.spec.a[?'b'].orValue('') == 'set'", obj);
}

#[test]
fn kubernetes_libraries() {
    let obj = json!({"name": "my-app", "cpu": "500m", "ip": "10.0.0.1", "url": "https://example.com:8443/p?q=1"});
    truthy("self.name.matches('^[a-z-]+$')", obj.clone());
    truthy("self.name.find('[a-z]+') == 'my'", obj.clone());
    truthy("self.name.split('-') == ['my', 'app']", obj.clone());
    truthy("self.name.upperAscii() == 'MY-APP' && self.name.replace('-', '_') == 'my_app'", obj.clone());
    truthy("self.name.indexOf('app') == 3 && self.name.substring(3) == 'app'", obj.clone());
    truthy(
        "quantity(self.cpu).isLessThan(quantity('1')) && quantity('1Gi').isGreaterThan(quantity('500Mi'))",
        obj.clone(),
    );
    truthy("isQuantity(self.cpu) && !isQuantity('1x')", obj.clone());
    truthy("ip(self.ip).family() == 4 && cidr('10.0.0.0/8').containsIP(ip(self.ip))", obj.clone());
    truthy("isIP(self.ip) && !isCIDR('bad')", obj.clone());
    truthy("url(self.url).getHost() == 'example.com:8443' && url(self.url).getPort() == '8443'", obj.clone());
    truthy("[3, 1, 2].sort() == [1, 2, 3] && [1, 2, 3].isSorted() && [1, 2, 3].sum() == 6", obj.clone());
    truthy("['a', 'b'].join(',') == 'a,b'", obj.clone());
    truthy("!format.dns1123Label().validate(self.name).hasValue()", obj.clone());
    truthy("format.dns1123Label().validate('Not_OK').hasValue()", obj.clone());
    truthy("'%s has %d'.format(['x', 2]) == 'x has 2'", obj);
}

#[test]
fn compile_errors_have_positions() {
    let err = compile("self.a +", &["self"]).unwrap_err();
    assert_eq!(err[0].line, 1);
    assert!(err[0].to_string().starts_with("ERROR: <input>:1:"), "{}", err[0]);
    let err = compile("self.a == 1 &&\n  nope.b", &["self"]).unwrap_err();
    assert_eq!(err[0].message, "undeclared reference to 'nope' (in container '')");
    assert_eq!((err[0].line, err[0].column), (2, 3));
    // Message (struct) construction is not available: a compile error, never a panic.
    assert!(compile("Foo{a: 1}", &[]).is_err());
    // Comprehension variables are in scope only inside the comprehension.
    assert!(compile("self.all(x, x > 0) && x", &["self"]).is_err());
    assert!(compile("", &[]).is_err());
}

#[test]
fn runtime_errors_use_upstreams_words() {
    let e = eval("self.missing == 1", json!({})).unwrap_err();
    assert_eq!(e, EvalError::Runtime("no such key: missing".into()));
    assert!(eval("1 / 0 == 1", json!({})).is_err());
}

#[test]
fn result_kinds() {
    let p = compile("'x' + 'y'", &[]).unwrap();
    let out = p.evaluate(&Activation::new(), &mut CostBudget::default()).unwrap();
    assert_eq!(out.kind(), ValueKind::String);
    assert_eq!(out.as_str(), Some("xy"));
    assert_eq!(out.as_bool(), None);
}

#[test]
fn cost_limits_stop_expensive_expressions() {
    let items: Vec<i64> = (0..2000).collect();
    let obj = json!({"items": items});
    // A quadratic comprehension over 2000 elements passes the per-call limit.
    let p = compile("self.items.all(a, self.items.all(b, a + b >= 0))", &["self"]).unwrap();
    let act = Activation::new().with("self", &obj);
    let err = p.evaluate(&act, &mut CostBudget::default()).unwrap_err();
    assert!(matches!(err, EvalError::CostLimitExceeded { .. }), "{err:?}");
    assert_eq!(err.to_string(), "operation cancelled: actual cost limit exceeded");
    // A linear one does not, and is charged to the shared budget.
    let p = compile("self.items.all(a, a >= 0)", &["self"]).unwrap();
    let mut budget = CostBudget::new(1_000_000, 50_000);
    assert!(p.evaluate(&act, &mut budget).is_ok());
    assert!(budget.remaining() < 50_000);
    // Until the budget is spent.
    let mut spent = 0;
    while p.evaluate(&act, &mut budget).is_ok() {
        spent += 1;
        assert!(spent < 100, "budget never ran out");
    }
    assert_eq!(p.evaluate(&act, &mut budget).unwrap_err(), EvalError::BudgetExhausted);
}

fn rule(src: &str) -> Rule {
    Rule { rule: src.into(), ..Rule::default() }
}

#[test]
fn crd_rules_and_messages() {
    let schema =
        json!({"type": "object", "properties": {"replicas": {"type": "integer"}, "namespace": {"type": "string"}}});
    let r = compile_rule(&rule("self.replicas >= 0")).unwrap();
    let mut b = CostBudget::default();
    assert_eq!(r.evaluate(&json!({"replicas": 1}), None, &schema, &mut b), Outcome::Valid);
    assert_eq!(
        r.evaluate(&json!({"replicas": -1}), None, &schema, &mut b),
        Outcome::Invalid(crate::rule::Violation {
            field_path: None,
            reason: "FieldValueInvalid".into(),
            detail: "failed rule: self.replicas >= 0".into()
        })
    );
    // Reserved words are escaped as upstream.
    let r = compile_rule(&rule("self.__namespace__ == 'x'")).unwrap();
    assert_eq!(r.evaluate(&json!({"namespace": "x"}), None, &schema, &mut b), Outcome::Valid);
    // messageExpression, reason and fieldPath.
    let r = compile_rule(&Rule {
        rule: "self.replicas < 10".into(),
        message: "too many".into(),
        message_expression: "'replicas ' + string(self.replicas) + ' is too many'".into(),
        reason: Some("FieldValueForbidden".into()),
        field_path: Some(".replicas".into()),
        ..Rule::default()
    })
    .unwrap();
    let Outcome::Invalid(v) = r.evaluate(&json!({"replicas": 12}), None, &schema, &mut b) else { panic!() };
    assert_eq!(v.detail, "replicas 12 is too many");
    assert_eq!(v.reason, "FieldValueForbidden");
    assert_eq!(v.field_path.as_deref(), Some(".replicas"));
    // A messageExpression that fails falls back to message.
    let r = compile_rule(&Rule {
        rule: "false".into(),
        message: "static".into(),
        message_expression: "self.nope".into(),
        ..Rule::default()
    })
    .unwrap();
    let Outcome::Invalid(v) = r.evaluate(&json!({}), None, &schema, &mut b) else { panic!() };
    assert_eq!(v.detail, "static");
    // Compile errors carry upstream's prefix.
    let e = compile_rule(&rule("self.replicas >")).unwrap_err();
    assert!(e.to_string().starts_with("compilation failed: ERROR: <input>:1:"), "{e}");
    // Runtime errors name the rule.
    let r = compile_rule(&rule("self.nope == 1")).unwrap();
    assert_eq!(
        r.evaluate(&json!({}), None, &schema, &mut b),
        Outcome::Error { detail: "no such key: nope evaluating rule: self.nope == 1".into(), stop: false }
    );
}

#[test]
fn transition_rules() {
    let schema = json!({"type": "string"});
    let r =
        compile_rule(&Rule { rule: "self == oldSelf".into(), message: "Value is immutable".into(), ..Rule::default() })
            .unwrap();
    assert!(r.is_transition_rule());
    let mut b = CostBudget::default();
    // Create: no old value, not evaluated.
    assert_eq!(r.evaluate(&json!("a"), None, &schema, &mut b), Outcome::Skipped);
    assert_eq!(r.evaluate(&json!("a"), Some(&json!("a")), &schema, &mut b), Outcome::Valid);
    let Outcome::Invalid(v) = r.evaluate(&json!("b"), Some(&json!("a")), &schema, &mut b) else { panic!() };
    assert_eq!(v.detail, "Value is immutable");
    // optionalOldSelf: evaluated on create too, oldSelf an optional.
    let r = compile_rule(&Rule {
        rule: "!oldSelf.hasValue() || self == oldSelf.value()".into(),
        optional_old_self: true,
        ..Rule::default()
    })
    .unwrap();
    assert_eq!(r.evaluate(&json!("a"), None, &schema, &mut b), Outcome::Valid);
    assert_eq!(r.evaluate(&json!("a"), Some(&json!("a")), &schema, &mut b), Outcome::Valid);
    assert!(matches!(r.evaluate(&json!("b"), Some(&json!("a")), &schema, &mut b), Outcome::Invalid(_)));
}

#[test]
fn schema_formats_become_timestamps_and_durations() {
    let schema = json!({"type": "object", "properties": {
        "at": {"type": "string", "format": "date-time"},
        "timeout": {"type": "string", "format": "duration"}}});
    let r =
        compile_rule(&rule("self.at > timestamp('2024-01-01T00:00:00Z') && self.timeout <= duration('1h')")).unwrap();
    let v = json!({"at": "2025-06-01T00:00:00Z", "timeout": "30m"});
    assert_eq!(r.evaluate(&v, None, &schema, &mut CostBudget::default()), Outcome::Valid);
}

#[test]
fn api_types_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<crate::Program>();
    send_sync::<crate::Activation>();
    send_sync::<crate::Output>();
    send_sync::<crate::rule::CompiledRule>();
}
