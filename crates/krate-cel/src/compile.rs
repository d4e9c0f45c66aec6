//! Parsing, the rewrites that add what the parser lacks (`cel.bind`, two-variable
//! comprehensions, `transformList`/`transformMap`), and compile-time checks.

use std::collections::BTreeSet;

use kube_cel::cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, ListExpr, LiteralValue};
use kube_cel::cel::parser::Parser;
use kube_cel::cel::{IdedExpr, ParseErrors};

use crate::program::Program;

/// A compile error with the position (1-based line and column) it was found at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ERROR: <input>:{line}:{column}: {message}")]
pub struct CompileError {
    pub message: String,
    pub line: usize,
    pub column: usize,
}

/// Type names usable as values (`type(x) == string`).
pub(crate) const TYPE_IDENTS: &[&str] =
    &["bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type", "dyn"];

/// Compiles `source` for an environment declaring `variables` (top-level names such
/// as `self`, `object`, `params`). Errors carry upstream's
/// `ERROR: <input>:LINE:COL: message` form; several are joined by newlines in
/// `Display` of the first one's caller.
pub fn compile(source: &str, variables: &[&str]) -> Result<Program, Vec<CompileError>> {
    if source.trim().is_empty() {
        return Err(vec![CompileError {
            message: "Syntax error: mismatched input '<EOF>'".into(),
            line: 1,
            column: 1,
        }]);
    }
    let parsed = Parser::new().enable_optional_syntax(true).parse(source).map_err(|e| parse_errors(&e))?;
    let mut rewriter = Rewriter::default();
    let expr = rewriter.rewrite(parsed).map_err(|m| vec![at(source, m, None)])?;
    let mut errors = Vec::new();
    let declared: BTreeSet<String> = variables.iter().map(|v| v.to_string()).collect();
    check(&expr, &declared, &mut Vec::new(), source, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Program::new(source.to_string(), expr))
}

fn parse_errors(e: &ParseErrors) -> Vec<CompileError> {
    e.errors
        .iter()
        .map(|e| CompileError {
            message: e.msg.clone(),
            line: e.pos.0.max(1) as usize,
            column: e.pos.1.max(0) as usize + 1,
        })
        .collect()
}

/// An error about `word`, placed at its first occurrence as a whole word (the
/// parser keeps no positions for rewritten or checked nodes).
fn at(source: &str, message: String, word: Option<&str>) -> CompileError {
    let offset = word
        .and_then(|w| {
            source.match_indices(w).map(|(i, _)| i).find(|&i| {
                let before = source[..i].chars().next_back();
                let after = source[i + w.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
        .unwrap_or(0);
    let line = source[..offset].matches('\n').count() + 1;
    let column = offset - source[..offset].rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    CompileError { message, line, column }
}

fn check(
    expr: &IdedExpr,
    declared: &BTreeSet<String>,
    scope: &mut Vec<String>,
    src: &str,
    errors: &mut Vec<CompileError>,
) {
    match &expr.expr {
        Expr::Ident(name) => {
            if !declared.contains(name) && !scope.contains(name) && !TYPE_IDENTS.contains(&name.as_str()) {
                errors.push(at(src, format!("undeclared reference to '{name}' (in container '')"), Some(name)));
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                // `ns.fn(..)` with an undeclared `ns` is a qualified function name.
                let namespace = matches!(&target.expr, Expr::Ident(n) if !declared.contains(n) && !scope.contains(n));
                if !namespace {
                    check(target, declared, scope, src, errors);
                }
            }
            for a in &call.args {
                check(a, declared, scope, src, errors);
            }
        }
        Expr::Comprehension(c) => {
            check(&c.iter_range, declared, scope, src, errors);
            check(&c.accu_init, declared, scope, src, errors);
            let depth = scope.len();
            scope.push(c.accu_var.clone());
            check(&c.result, declared, scope, src, errors);
            scope.push(c.iter_var.clone());
            check(&c.loop_cond, declared, scope, src, errors);
            check(&c.loop_step, declared, scope, src, errors);
            scope.truncate(depth);
        }
        Expr::List(l) => l.elements.iter().for_each(|e| check(e, declared, scope, src, errors)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(e) = &entry.expr {
                    check(&e.key, declared, scope, src, errors);
                    check(&e.value, declared, scope, src, errors);
                }
            }
        }
        Expr::Select(s) => check(&s.operand, declared, scope, src, errors),
        Expr::Literal(_) => {}
        Expr::Struct(s) => errors.push(at(
            src,
            format!("undeclared reference to '{}' (in container '')", s.type_name),
            Some(&s.type_name),
        )),
        Expr::Unspecified => errors.push(at(src, "unsupported expression".into(), None)),
    }
}

/// Rewrites calls the interpreter does not know into comprehensions it does.
#[derive(Default)]
struct Rewriter {
    fresh: u32,
}

fn node(expr: Expr) -> IdedExpr {
    IdedExpr { id: 0, expr }
}

fn ident(name: &str) -> IdedExpr {
    node(Expr::Ident(name.to_string()))
}

fn call(func: &str, target: Option<IdedExpr>, args: Vec<IdedExpr>) -> IdedExpr {
    node(Expr::Call(CallExpr { func_name: func.to_string(), target: target.map(Box::new), args }))
}

fn index(operand: IdedExpr, i: i64) -> IdedExpr {
    call("_[_]", None, vec![operand, node(Expr::Literal(LiteralValue::Int(i.into())))])
}

/// `cel.bind(var, init, body)`: a comprehension over nothing whose accumulator is
/// `var`, as upstream's macro expands it.
fn bind(var: String, init: IdedExpr, body: IdedExpr) -> IdedExpr {
    node(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: node(Expr::List(ListExpr::new(vec![]))),
        iter_var: "#unused".into(),
        iter_var2: None,
        accu_var: var,
        accu_init: init,
        loop_cond: node(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: ident("#unused"),
        result: body,
    })))
}

fn ident_name(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Ident(n) => Some(n.clone()),
        _ => None,
    }
}

/// Expression of a one-variable macro, parsed from a template and with the
/// placeholders `__T` (target), `__P` (body) filled in.
fn template(source: &str, target: IdedExpr, body: IdedExpr, extra: Option<IdedExpr>) -> Result<IdedExpr, String> {
    let parsed = Parser::new().parse(source).map_err(|e| e.to_string())?;
    Ok(fill(parsed, &target, &body, extra.as_ref()))
}

fn fill(e: IdedExpr, target: &IdedExpr, body: &IdedExpr, extra: Option<&IdedExpr>) -> IdedExpr {
    let id = e.id;
    let expr = match e.expr {
        Expr::Ident(n) if n == "__T" => return target.clone(),
        Expr::Ident(n) if n == "__P" => return body.clone(),
        Expr::Ident(n) if n == "__F" && extra.is_some() => return extra.cloned().unwrap_or_default(),
        Expr::Call(mut c) => {
            c.target = c.target.map(|t| Box::new(fill(*t, target, body, extra)));
            c.args = c.args.into_iter().map(|a| fill(a, target, body, extra)).collect();
            Expr::Call(c)
        }
        Expr::Comprehension(mut c) => {
            c.iter_range = fill(c.iter_range, target, body, extra);
            c.accu_init = fill(c.accu_init, target, body, extra);
            c.loop_cond = fill(c.loop_cond, target, body, extra);
            c.loop_step = fill(c.loop_step, target, body, extra);
            c.result = fill(c.result, target, body, extra);
            Expr::Comprehension(c)
        }
        Expr::List(mut l) => {
            l.elements = l.elements.into_iter().map(|x| fill(x, target, body, extra)).collect();
            Expr::List(l)
        }
        Expr::Select(mut s) => {
            s.operand = Box::new(fill(*s.operand, target, body, extra));
            Expr::Select(s)
        }
        other => other,
    };
    IdedExpr { id, expr }
}

impl Rewriter {
    fn rewrite(&mut self, e: IdedExpr) -> Result<IdedExpr, String> {
        let id = e.id;
        let expr = match e.expr {
            Expr::Call(c) => return self.rewrite_call(id, c),
            Expr::Comprehension(mut c) => {
                c.iter_range = self.rewrite(c.iter_range)?;
                c.accu_init = self.rewrite(c.accu_init)?;
                c.loop_cond = self.rewrite(c.loop_cond)?;
                c.loop_step = self.rewrite(c.loop_step)?;
                c.result = self.rewrite(c.result)?;
                Expr::Comprehension(c)
            }
            Expr::List(mut l) => {
                l.elements = l.elements.into_iter().map(|x| self.rewrite(x)).collect::<Result<_, _>>()?;
                Expr::List(l)
            }
            Expr::Map(mut m) => {
                for entry in &mut m.entries {
                    if let EntryExpr::MapEntry(me) = &mut entry.expr {
                        me.key = self.rewrite(std::mem::take(&mut me.key))?;
                        me.value = self.rewrite(std::mem::take(&mut me.value))?;
                    }
                }
                Expr::Map(m)
            }
            Expr::Select(mut s) => {
                s.operand = Box::new(self.rewrite(*s.operand)?);
                Expr::Select(s)
            }
            other => other,
        };
        Ok(IdedExpr { id, expr })
    }

    fn rewrite_call(&mut self, id: u64, mut c: CallExpr) -> Result<IdedExpr, String> {
        c.target = match c.target {
            Some(t) => Some(Box::new(self.rewrite(*t)?)),
            None => None,
        };
        c.args = c.args.into_iter().map(|a| self.rewrite(a)).collect::<Result<_, _>>()?;
        if c.func_name == "_?._" {
            c.func_name = "__opt_select__".into();
            return Ok(IdedExpr { id, expr: Expr::Call(c) });
        }
        let target_is =
            |name: &str| matches!(c.target.as_deref(), Some(IdedExpr { expr: Expr::Ident(n), .. }) if n == name);

        // cel.bind(name, init, body)
        if c.func_name == "bind" && target_is("cel") || c.func_name == "cel.bind" && c.target.is_none() {
            if c.args.len() != 3 {
                return Err("cel.bind() requires 3 arguments".into());
            }
            let mut args = c.args.into_iter();
            let var = args
                .next()
                .and_then(|v| ident_name(&v))
                .ok_or("cel.bind() variable name must be a simple identifier")?;
            let (init, body) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
            return Ok(bind(var, init, body));
        }

        let two_var = matches!(c.func_name.as_str(), "all" | "exists" | "existsOne" | "exists_one")
            && c.args.len() == 3
            || c.func_name == "transformList" && matches!(c.args.len(), 3 | 4)
            || c.func_name == "transformMap" && matches!(c.args.len(), 3 | 4);
        if two_var && let Some(target) = c.target.take() {
            let first = ident_name(&c.args[0])
                .ok_or_else(|| format!("{}() variable name must be a simple identifier", c.func_name))?;
            let second = ident_name(&c.args[1])
                .ok_or_else(|| format!("{}() variable name must be a simple identifier", c.func_name))?;
            self.fresh += 1;
            let pair = format!("__kv{}__", self.fresh);
            let with_vars = |e: IdedExpr| {
                bind(first.clone(), index(ident(&pair), 0), bind(second.clone(), index(ident(&pair), 1), e))
            };
            let pairs = call("__pairs__", None, vec![*target]);
            let mut args = c.args.into_iter().skip(2);
            let a = args.next().unwrap_or_default();
            let b = args.next();
            let src = match (c.func_name.as_str(), &b) {
                ("all", _) => format!("__T.all({pair}, __P)"),
                ("exists", _) => format!("__T.exists({pair}, __P)"),
                ("existsOne" | "exists_one", _) => format!("__T.exists_one({pair}, __P)"),
                ("transformList", None) => format!("__T.map({pair}, __P)"),
                ("transformList", Some(_)) => format!("__T.filter({pair}, __F).map({pair}, __P)"),
                ("transformMap", None) => format!("__entries_to_map__(__T.map({pair}, [{pair}[0], __P]))"),
                _ => format!("__entries_to_map__(__T.filter({pair}, __F).map({pair}, [{pair}[0], __P]))"),
            };
            // With a filter, `a` is the filter and `b` the transform.
            let (body, filter) = match b {
                Some(transform) => (with_vars(transform), Some(with_vars(a))),
                None => (with_vars(a), None),
            };
            return template(&src, pairs, body, filter);
        }
        Ok(IdedExpr { id, expr: Expr::Call(c) })
    }
}
