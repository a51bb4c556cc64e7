//! Validating the dependency graph and ordering services for start.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::spec::ServiceSpec;

/// Service indexes in the order a supervisor starts them: every dependency
/// before its dependents, otherwise as given. Errors on duplicate names,
/// unknown dependencies and cycles, as [`Supervisor`](crate::Supervisor)
/// would when started with these specs.
pub fn start_order(specs: &[ServiceSpec]) -> Result<Vec<usize>> {
    let mut index = HashMap::new();
    for (i, spec) in specs.iter().enumerate() {
        if index.insert(spec.name.as_str(), i).is_some() {
            return Err(Error::DuplicateService { name: spec.name.clone() });
        }
    }
    let mut deps = Vec::with_capacity(specs.len());
    for spec in specs {
        let mut list = Vec::new();
        for dep in &spec.depends_on {
            let Some(&j) = index.get(dep.service.as_str()) else {
                return Err(Error::UnknownDependency {
                    service: spec.name.clone(),
                    dependency: dep.service.clone(),
                });
            };
            list.push(j);
        }
        deps.push(list);
    }
    depth_first(&deps).map_err(|cycle| Error::DependencyCycle {
        cycle: cycle.into_iter().map(|i| specs[i].name.clone()).collect(),
    })
}

/// The nodes of a graph (each node's edges in `deps`) with every node after
/// the ones it points at, otherwise in index order; or a cycle, as the
/// nodes along it with the first one again at the end. The one search for
/// cycles: the profile's check names the same cycle the
/// supervisor would refuse.
pub fn depth_first(deps: &[Vec<usize>]) -> std::result::Result<Vec<usize>, Vec<usize>> {
    // 0 = unvisited, 1 = on the stack, 2 = done.
    let mut mark = vec![0u8; deps.len()];
    let mut order = Vec::with_capacity(deps.len());
    let mut stack = Vec::new();
    for root in 0..deps.len() {
        visit(root, deps, &mut mark, &mut order, &mut stack)?;
    }
    Ok(order)
}

fn visit(
    node: usize,
    deps: &[Vec<usize>],
    mark: &mut [u8],
    order: &mut Vec<usize>,
    stack: &mut Vec<usize>,
) -> std::result::Result<(), Vec<usize>> {
    match mark[node] {
        2 => return Ok(()),
        1 => {
            let from = stack.iter().position(|&n| n == node).unwrap_or(0);
            let mut cycle = stack[from..].to_vec();
            cycle.push(node);
            return Err(cycle);
        }
        _ => {}
    }
    mark[node] = 1;
    stack.push(node);
    for &dep in &deps[node] {
        visit(dep, deps, mark, order, stack)?;
    }
    stack.pop();
    mark[node] = 2;
    order.push(node);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Condition, Dependency};

    fn svc(name: &str, deps: &[&str]) -> ServiceSpec {
        let mut s = ServiceSpec::new(name, "true", Vec::<String>::new(), ".");
        s.depends_on = deps
            .iter()
            .map(|d| Dependency { service: (*d).to_owned(), condition: Condition::Ready })
            .collect();
        s
    }

    #[test]
    fn dependencies_come_first() {
        let specs = [svc("host", &["server"]), svc("vite", &[]), svc("server", &[])];
        let order = start_order(&specs).expect("valid");
        let pos = |n: &str| order.iter().position(|&i| specs[i].name == n).expect("present");
        assert!(pos("server") < pos("host"));
        assert_eq!(order.len(), 3);
    }

    #[test]
    fn rejects_bad_graphs() {
        let dup = start_order(&[svc("a", &[]), svc("a", &[])]).expect_err("duplicate");
        assert!(matches!(dup, Error::DuplicateService { .. }));
        let unknown = start_order(&[svc("a", &["b"])]).expect_err("unknown");
        assert!(matches!(unknown, Error::UnknownDependency { .. }));
        let cycle = start_order(&[svc("a", &["b"]), svc("b", &["a"])]).expect_err("cycle");
        assert!(cycle.to_string().contains("a -> b -> a"), "{cycle}");
    }
}
