//! A compiled expression and its evaluation.

use std::panic::{AssertUnwindSafe, catch_unwind};

use kube_cel::cel::{Context, ExecutionError, IdedExpr, Value};

use crate::cost::Estimator;
use crate::{Activation, CostBudget, Output};

/// Why an evaluation failed. The messages are upstream's where it has them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// The expression alone would pass the per-call limit.
    #[error("operation cancelled: actual cost limit exceeded")]
    CostLimitExceeded { cost: u64, limit: u64 },
    /// The budget shared by a request's expressions is spent.
    #[error("validation failed due to running out of cost budget, no further validation rules will be run")]
    BudgetExhausted,
    /// A runtime error (no such key, no matching overload, division by zero...).
    #[error("{0}")]
    Runtime(String),
}

thread_local! {
    static ROOT: Context<'static> = crate::functions::root();
}

/// A compiled expression.
#[derive(Debug, Clone)]
pub struct Program {
    source: String,
    expr: IdedExpr,
}

impl Program {
    pub(crate) fn new(source: String, expr: IdedExpr) -> Self {
        Self { source, expr }
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the expression mentions `name` as a variable (for example `oldSelf`,
    /// which makes a CRD rule a transition rule).
    pub fn references(&self, name: &str) -> bool {
        fn walk(e: &IdedExpr, name: &str) -> bool {
            use kube_cel::cel::common::ast::{EntryExpr, Expr};
            match &e.expr {
                Expr::Ident(n) => n == name,
                Expr::Select(s) => walk(&s.operand, name),
                Expr::Call(c) => {
                    c.target.as_deref().is_some_and(|t| walk(t, name)) || c.args.iter().any(|a| walk(a, name))
                }
                Expr::List(l) => l.elements.iter().any(|x| walk(x, name)),
                Expr::Map(m) => m.entries.iter().any(|en| match &en.expr {
                    EntryExpr::MapEntry(me) => walk(&me.key, name) || walk(&me.value, name),
                    EntryExpr::StructField(f) => walk(&f.value, name),
                }),
                Expr::Comprehension(c) => [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                    .into_iter()
                    .any(|x| walk(x, name)),
                _ => false,
            }
        }
        walk(&self.expr, name)
    }

    /// Whether the expression mentions `variables.NAME` (admission policies' composited variables).
    pub fn references_field(&self, variable: &str, field: &str) -> bool {
        fn walk(e: &IdedExpr, var: &str, field: &str) -> bool {
            use kube_cel::cel::common::ast::{EntryExpr, Expr};
            match &e.expr {
                Expr::Select(s) => {
                    matches!(&s.operand.expr, Expr::Ident(n) if n == var) && s.field == field
                        || walk(&s.operand, var, field)
                }
                Expr::Call(c) => {
                    c.target.as_deref().is_some_and(|t| walk(t, var, field))
                        || c.args.iter().any(|a| walk(a, var, field))
                }
                Expr::List(l) => l.elements.iter().any(|x| walk(x, var, field)),
                Expr::Map(m) => m.entries.iter().any(|en| match &en.expr {
                    EntryExpr::MapEntry(me) => walk(&me.key, var, field) || walk(&me.value, var, field),
                    EntryExpr::StructField(f) => walk(&f.value, var, field),
                }),
                Expr::Comprehension(c) => [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                    .into_iter()
                    .any(|x| walk(x, var, field)),
                _ => false,
            }
        }
        walk(&self.expr, variable, field)
    }

    /// The estimated cost of evaluating with `activation` (see `cost`).
    pub fn estimate_cost(&self, activation: &Activation) -> u64 {
        ROOT.with(|root| {
            let ctx = scope(root, activation);
            Estimator { ctx: &ctx, sizes: activation.sizes, scope: Vec::new() }.cost(&self.expr)
        })
    }

    /// Evaluates with `activation`, charging the estimated cost to `budget` first.
    pub fn evaluate(&self, activation: &Activation, budget: &mut CostBudget) -> Result<Output, EvalError> {
        ROOT.with(|root| {
            let ctx = scope(root, activation);
            let cost = Estimator { ctx: &ctx, sizes: activation.sizes, scope: Vec::new() }.cost(&self.expr);
            budget.charge(cost)?;
            // The interpreter has a few panicking paths; a client's expression must
            // never take a server thread down.
            match catch_unwind(AssertUnwindSafe(|| Value::resolve(&self.expr, &ctx))) {
                Ok(Ok(v)) => Ok(Output(v)),
                Ok(Err(e)) => Err(EvalError::Runtime(runtime_message(&e))),
                Err(_) => Err(EvalError::Runtime("internal error evaluating expression".into())),
            }
        })
    }
}

fn scope<'a>(root: &'a Context<'static>, activation: &Activation) -> Context<'a> {
    let mut ctx = root.new_inner_scope();
    for (name, value) in &activation.vars {
        ctx.add_variable_from_value(name.clone(), value.clone());
    }
    ctx
}

/// cel-go's wording for the common errors.
fn runtime_message(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::NoSuchOverload => "no such overload".into(),
        ExecutionError::UndeclaredReference(r) => format!("no such attribute: {r}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::IndexOutOfBounds(i) => {
            format!("index out of bounds: {}", Output(i.clone()).to_json().unwrap_or_default())
        }
        ExecutionError::Overflow(..) => "integer overflow".into(),
        ExecutionError::FunctionError { function, message } => format!("{function}: {message}"),
        other => other.to_string(),
    }
}
