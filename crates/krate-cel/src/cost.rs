//! Cost limits, approximating upstream's.
//!
//! Upstream's interpreter counts cost as it runs (one unit per function call and
//! field access, more for functions proportional to their inputs' sizes) and stops
//! an expression at a per-call limit, and all of a request's expressions at a
//! runtime budget. The `cel` interpreter cannot be metered while it runs, so krate
//! estimates each evaluation's cost beforehand, with the actual inputs: a
//! comprehension over a path of the input (`self.spec.items.all(..)`) iterates as
//! many times as that list has elements, any other one as many as the largest
//! list or map of the input; string functions cost a tenth of the longest input
//! string, as upstream's. The estimate is an upper bound (short-circuits are not
//! foreseen), and expressions whose estimate passes the limits are not run.

use kube_cel::cel::common::ast::{EntryExpr, Expr, LiteralValue};
use kube_cel::cel::{Context, IdedExpr, Value};

use crate::activation::Sizes;

/// Upstream's per-expression limit (celconfig.PerCallLimit).
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// Upstream's budget for all expressions of one validation (celconfig.RuntimeCELCostBudget).
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// What evaluations may still spend: a per-expression limit and a total, shared
/// by the expressions one request evaluates.
#[derive(Debug, Clone)]
pub struct CostBudget {
    per_call_limit: u64,
    remaining: u64,
}

impl Default for CostBudget {
    fn default() -> Self {
        Self::new(PER_CALL_LIMIT, RUNTIME_COST_BUDGET)
    }
}

impl CostBudget {
    pub fn new(per_call_limit: u64, total: u64) -> Self {
        Self { per_call_limit, remaining: total }
    }

    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    pub fn per_call_limit(&self) -> u64 {
        self.per_call_limit
    }

    pub(crate) fn charge(&mut self, cost: u64) -> Result<(), crate::EvalError> {
        if cost > self.per_call_limit {
            return Err(crate::EvalError::CostLimitExceeded { cost, limit: self.per_call_limit });
        }
        if cost > self.remaining {
            self.remaining = 0;
            return Err(crate::EvalError::BudgetExhausted);
        }
        self.remaining -= cost;
        Ok(())
    }
}

/// Functions whose cost grows with the length of their string inputs.
const STRING_FUNCTIONS: &[&str] = &[
    "matches",
    "find",
    "findAll",
    "contains",
    "startsWith",
    "endsWith",
    "split",
    "replace",
    "lowerAscii",
    "upperAscii",
    "join",
    "indexOf",
    "lastIndexOf",
    "substring",
    "trim",
    "format",
    "url",
    "isURL",
    "quantity",
    "isQuantity",
    "ip",
    "isIP",
    "cidr",
    "isCIDR",
    "charAt",
    "_+_",
    "_==_",
    "_!=_",
];
/// Functions whose cost grows with the size of their list inputs.
const LIST_FUNCTIONS: &[&str] = &[
    "sort",
    "isSorted",
    "sum",
    "min",
    "max",
    "distinct",
    "flatten",
    "slice",
    "reverse",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "@in",
    "join",
    "indexOf",
    "lastIndexOf",
    "__pairs__",
    "__entries_to_map__",
];

pub(crate) struct Estimator<'a, 'c> {
    pub ctx: &'a Context<'c>,
    pub sizes: Sizes,
    /// Comprehension variables in scope: paths through them cannot be resolved.
    pub scope: Vec<String>,
}

impl Estimator<'_, '_> {
    pub fn cost(&mut self, e: &IdedExpr) -> u64 {
        match &e.expr {
            Expr::Literal(_) | Expr::Unspecified | Expr::Struct(_) => 0,
            Expr::Ident(_) => 1,
            Expr::Select(s) => 1 + self.cost(&s.operand),
            Expr::List(l) => 1 + l.elements.iter().map(|x| self.cost(x)).sum::<u64>(),
            Expr::Map(m) => {
                let mut c = 1;
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        c += self.cost(&me.key) + self.cost(&me.value);
                    }
                }
                c
            }
            Expr::Call(call) => {
                let mut c = 1;
                if let Some(t) = &call.target {
                    c += self.cost(t);
                }
                if call.func_name == "_?_:_" && call.args.len() == 3 {
                    let branches = self.cost(&call.args[1]).max(self.cost(&call.args[2]));
                    return c + self.cost(&call.args[0]) + branches;
                }
                c += call.args.iter().map(|a| self.cost(a)).sum::<u64>();
                let name = call.func_name.as_str();
                if STRING_FUNCTIONS.contains(&name) {
                    c += self.sizes.string.div_ceil(10);
                }
                if LIST_FUNCTIONS.contains(&name) {
                    c += self.sizes.collection;
                }
                c
            }
            Expr::Comprehension(comp) => {
                let n = self.iterations(&comp.iter_range);
                let mut c = self.cost(&comp.iter_range) + self.cost(&comp.accu_init);
                let depth = self.scope.len();
                self.scope.push(comp.accu_var.clone());
                self.scope.push(comp.iter_var.clone());
                let per_iteration = 1 + self.cost(&comp.loop_cond) + self.cost(&comp.loop_step);
                c = c.saturating_add(n.saturating_mul(per_iteration));
                c = c.saturating_add(self.cost(&comp.result));
                self.scope.truncate(depth);
                c
            }
        }
    }

    fn iterations(&self, range: &IdedExpr) -> u64 {
        match &range.expr {
            Expr::List(l) => return l.elements.len() as u64,
            Expr::Call(c) if c.func_name == "__pairs__" && c.args.len() == 1 => return self.iterations(&c.args[0]),
            Expr::Call(c) if c.func_name == "lists.range" => {
                if let Some(IdedExpr { expr: Expr::Literal(LiteralValue::Int(i)), .. }) = c.args.first() {
                    return (*i.inner()).max(0) as u64;
                }
            }
            _ => {}
        }
        if self.is_input_path(range) {
            return match Value::resolve(range, self.ctx) {
                Ok(Value::List(l)) => l.len() as u64,
                Ok(Value::Map(m)) => m.map.len() as u64,
                _ => 0,
            };
        }
        self.sizes.collection
    }

    /// A chain of field selections rooted at an input variable (cheap to resolve).
    fn is_input_path(&self, e: &IdedExpr) -> bool {
        match &e.expr {
            Expr::Ident(n) => !self.scope.contains(n),
            Expr::Select(s) => !s.test && self.is_input_path(&s.operand),
            _ => false,
        }
    }
}
