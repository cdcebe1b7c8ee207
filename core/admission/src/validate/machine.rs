//! `spec.domain.machine.type` must be one the cluster allows for the guest's architecture
//! (KubeVirt's `validateEmulatedMachine`: shell patterns such as `q35*` and `pc-q35*`, matched
//! as Go's `filepath.Match` matches them).

use super::CauseKind;
use super::causes::Causes;
use crate::api::VirtualMachineInstanceSpec;
use crate::config::ClusterConfig;

const FIELD: &str = "spec.domain.machine.type";

pub(super) fn check(
    spec: &VirtualMachineInstanceSpec,
    config: &ClusterConfig,
    causes: &mut Causes,
) {
    let Some(machine) = spec
        .domain
        .machine
        .as_ref()
        .and_then(|m| m.r#type.as_deref())
        .filter(|t| !t.is_empty())
    else {
        return;
    };
    let allowed = config.emulated_machines(spec.architecture.as_deref().unwrap_or(""));
    if !allowed.iter().any(|p| pattern_matches(p, machine)) {
        causes.push(
            CauseKind::Invalid,
            FIELD,
            // Go's %v of a []string: `[q35* pc-q35*]`.
            format!(
                "{FIELD} is not supported: {machine} (allowed values: [{}])",
                allowed.join(" ")
            ),
        );
    }
}

/// Go's `filepath.Match` for the patterns KubeVirt uses: `*` any run of characters but `/`,
/// `?` one such character, `[...]` a class (`^` or `!` negates, `a-z` ranges), `\` escapes.
/// A malformed pattern matches nothing (Go reports an error, which KubeVirt ignores).
pub(crate) fn pattern_matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point per `*` (linear in practice).
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') if n[ni] != '/' => {
                pi += 1;
                ni += 1;
                continue;
            }
            Some('[') => match class(&p, pi, n[ni]) {
                Some((true, next)) => {
                    pi = next;
                    ni += 1;
                    continue;
                }
                Some((false, _)) => {}
                None => return false,
            },
            Some('\\') if p.get(pi + 1) == Some(&n[ni]) => {
                pi += 2;
                ni += 1;
                continue;
            }
            Some(c) if !matches!(c, '?' | '[' | '\\') && *c == n[ni] => {
                pi += 1;
                ni += 1;
                continue;
            }
            _ => {}
        }
        // Mismatch: let the last `*` take one more character (never a `/`).
        match star {
            Some((sp, sn)) if n[sn] != '/' => {
                star = Some((sp, sn + 1));
                pi = sp + 1;
                ni = sn + 1;
            }
            _ => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Matches `c` against the class starting at `p[at] == '['`: `(matched, index after ']')`, or
/// `None` when the class is malformed.
fn class(p: &[char], at: usize, c: char) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negated = matches!(p.get(i), Some('^' | '!'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let lo = match p.get(i)? {
            ']' if !first => return Some((matched != negated, i + 1)),
            '\\' => {
                i += 1;
                *p.get(i)?
            }
            ch => *ch,
        };
        first = false;
        i += 1;
        let hi = if p.get(i) == Some(&'-') && p.get(i + 1).is_some_and(|h| *h != ']') {
            i += 1;
            let h = match p.get(i)? {
                '\\' => {
                    i += 1;
                    *p.get(i)?
                }
                ch => *ch,
            };
            i += 1;
            h
        } else {
            lo
        };
        if lo <= c && c <= hi {
            matched = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pattern_matches;

    #[test]
    fn patterns_match_as_go_filepath_match() {
        for (p, n, want) in [
            ("q35*", "q35", true),
            ("q35*", "pc-q35-rhel9.4.0", false),
            ("pc-q35*", "pc-q35-rhel9.4.0", true),
            ("q35*", "pc-i440fx-9.0", false),
            ("virt*", "virt-8.2", true),
            ("*", "anything", true),
            ("*", "a/b", false),
            ("pc-?35", "pc-q35", true),
            ("pc-[pq]35", "pc-q35", true),
            ("pc-[^pq]35", "pc-q35", false),
            ("pc-[a-z]35", "pc-x35", true),
            ("pc-[", "pc-q", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            (r"q\*", "q*", true),
        ] {
            assert_eq!(pattern_matches(p, n), want, "{p} vs {n}");
        }
    }
}
