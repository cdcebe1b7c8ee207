//! The differences from KubeVirt v1.9.0 that kvrs keeps on purpose, as data
//! (`tests/deliberate-differences.json`) that the oracle comparisons consult.
//!
//! A comparison reports every [`Difference`] it finds (which comparison, a path saying what
//! differs, both sides); [`Deliberate::check`] says whether an entry of the file covers it and
//! records that the entry was used. At the end of the run [`Deliberate::finish`] fails when an
//! entry of the comparisons in scope matched nothing: a stale entry would otherwise hide a future
//! regression at the same path.
//!
//! Entry fields: `corpus` (the `../shared` directory), `test` (one of [`COMPARISONS`]), `cases`
//! (scenario names, or `"*"` for all), `path` (what differs, in the comparison's path form: a JSON
//! pointer, or an action selector such as `update virtualmachines`), `kubevirt` and `kvrs` (what
//! each does) and `why`. An entry's path covers a difference at the same path or inside it
//! (`/status` covers `/status/phase`); a `*` segment stands for any array index
//! (`/spec/volumes/*/persistentVolumeClaim/readOnly`) and `name[*]` for any XML element position
//! (`/domain/cputune[*]`).

use std::fmt;

use serde_json::Value;

/// The data file, compiled in (a change to it rebuilds the tests).
const FILE: &str = include_str!("../deliberate-differences.json");

/// The file's name as the messages print it.
pub const FILE_NAME: &str = "tests/deliberate-differences.json";

/// Every comparison an entry may name, as `(corpus, test)`, with the test that runs it. An entry
/// naming anything else is an error (it could never be checked, hence never reported as stale).
pub const COMPARISONS: &[(&str, &str)] = &[
    // tests/oracle_vm.rs
    ("oracle-vm", "vm-writes"),
    ("oracle-vm", "vm-created"),
    ("oracle-vm", "vm-status"),
    ("oracle-vm", "vm-final"),
    ("oracle-vm", "vm-events"),
    ("oracle-vm", "vm-queue"),
    ("oracle-vm", "vm-error"),
    // tests/oracle_handler.rs
    ("oracle-handler", "handler-sync"),
    // tests/oracle_pod.rs, oracle_convert.rs, oracle_defaults.rs, oracle_overhead.rs,
    // oracle_roundtrip.rs
    ("oracle", "pod"),
    ("oracle", "pod-without-vhost-net"),
    ("oracle", "domain"),
    ("oracle", "defaulted"),
    ("oracle", "overhead"),
    ("oracle", "roundtrip"),
    // tests/differential.rs (generated VMIs against KubeVirt's Go code, tests/diff)
    ("differential", "admit"),
    ("differential", "defaulted"),
    ("differential", "domain"),
    ("differential", "overhead"),
    ("differential", "pod"),
    // tests/migration_oracle.rs (generated scenarios against KubeVirt's migration controller,
    // tests/migration)
    ("migration", "migration-writes"),
    ("migration", "migration-content"),
    ("migration", "migration-events"),
    ("migration", "migration-queue"),
    // tests/vmistorage_oracle.rs (generated storage scenarios against KubeVirt's VMI controller,
    // tests/vmistorage)
    ("vmistorage", "vmistorage-writes"),
    ("vmistorage", "vmistorage-content"),
    ("vmistorage", "vmistorage-events"),
    ("vmistorage", "vmistorage-queue"),
];

/// One way kvrs's output differs from KubeVirt's in one scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The comparison that found it (one of [`COMPARISONS`]).
    pub test: String,
    /// What differs, in the comparison's path form.
    pub path: String,
    /// KubeVirt's side (`absent` when it has nothing there).
    pub kubevirt: String,
    /// kvrs's side (`absent` when it has nothing there).
    pub kvrs: String,
}

impl Difference {
    /// A difference at `path` of comparison `test`.
    pub fn new(
        test: &str,
        path: impl Into<String>,
        kubevirt: impl Into<String>,
        kvrs: impl Into<String>,
    ) -> Self {
        Self {
            test: test.into(),
            path: path.into(),
            kubevirt: kubevirt.into(),
            kvrs: kvrs.into(),
        }
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(whole)"
        } else {
            &self.path
        };
        write!(
            f,
            "{} {path}: kubevirt {}, kvrs {}",
            self.test, self.kubevirt, self.kvrs
        )
    }
}

/// Every difference between KubeVirt's document and kvrs's, as JSON pointers under `prefix`:
/// maps key by key, arrays element by element, anything else by equality.
pub fn json_differences(
    test: &str,
    prefix: &str,
    kubevirt: &Value,
    kvrs: &Value,
) -> Vec<Difference> {
    let mut out = Vec::new();
    json_diff(test, prefix, Some(kubevirt), Some(kvrs), &mut out);
    out
}

/// [`json_differences`] for two documents either of which may be absent.
pub fn json_differences_opt(
    test: &str,
    prefix: &str,
    kubevirt: Option<&Value>,
    kvrs: Option<&Value>,
) -> Vec<Difference> {
    let mut out = Vec::new();
    json_diff(test, prefix, kubevirt, kvrs, &mut out);
    out
}

fn shown(v: Option<&Value>) -> String {
    v.map_or_else(|| "absent".to_string(), Value::to_string)
}

fn json_diff(
    test: &str,
    path: &str,
    kubevirt: Option<&Value>,
    kvrs: Option<&Value>,
    out: &mut Vec<Difference>,
) {
    match (kubevirt, kvrs) {
        (Some(Value::Object(k)), Some(Value::Object(r))) => {
            for (key, kv) in k {
                json_diff(test, &format!("{path}/{key}"), Some(kv), r.get(key), out);
            }
            for (key, rv) in r.iter().filter(|(key, _)| !k.contains_key(*key)) {
                json_diff(test, &format!("{path}/{key}"), None, Some(rv), out);
            }
        }
        (Some(Value::Array(k)), Some(Value::Array(r))) => {
            for i in 0..k.len().max(r.len()) {
                json_diff(test, &format!("{path}/{i}"), k.get(i), r.get(i), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Difference::new(test, path, shown(a), shown(b))),
    }
}

/// How two sequences line up: a longest common subsequence (by `same`), earliest matches first.
/// Each item is `(Some(i), Some(j))` for a pair, or the index of an element only one side has.
pub fn align<T>(
    kubevirt: &[T],
    kvrs: &[T],
    same: impl Fn(&T, &T) -> bool,
) -> Vec<(Option<usize>, Option<usize>)> {
    let (n, m) = (kubevirt.len(), kvrs.len());
    // lcs[i][j]: the longest common subsequence of kubevirt[i..] and kvrs[j..].
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if same(&kubevirt[i], &kvrs[j]) {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && same(&kubevirt[i], &kvrs[j]) && lcs[i][j] == lcs[i + 1][j + 1] + 1 {
            out.push((Some(i), Some(j)));
            (i, j) = (i + 1, j + 1);
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push((Some(i), None));
            i += 1;
        } else {
            out.push((None, Some(j)));
            j += 1;
        }
    }
    out
}

/// One entry of the data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The corpus (`oracle`, `oracle-vm`, `oracle-handler`).
    pub corpus: String,
    /// The comparison (one of [`COMPARISONS`]).
    pub test: String,
    /// The scenarios it applies to; `*` for all.
    pub cases: Vec<String>,
    /// What differs; covers differences at this path or inside it.
    pub path: String,
    /// What KubeVirt does.
    pub kubevirt: String,
    /// What kvrs does.
    pub kvrs: String,
    /// Why kvrs differs.
    pub why: String,
}

impl Entry {
    fn covers(&self, case: &str, path: &str) -> bool {
        let case_listed = self.cases.iter().any(|c| c == "*" || c == case);
        let inside = path == self.path
            || path
                .strip_prefix(self.path.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
            || (self.path.contains('*') && wildcard_covers(&self.path, path));
        case_listed && inside
    }
}

/// `pattern` covers `path` segment by segment (`/`-separated), `pattern` being a prefix: a `*`
/// segment matches any one segment (an array index in a JSON pointer), and `name[*]` matches
/// `name[N]` (an element position in an XML path). Generated inputs put the same difference at
/// different indices; the oracle corpus's fixed cases never needed this.
fn wildcard_covers(pattern: &str, path: &str) -> bool {
    let (pat, segs): (Vec<&str>, Vec<&str>) =
        (pattern.split('/').collect(), path.split('/').collect());
    pat.len() <= segs.len()
        && pat.iter().zip(&segs).all(|(p, s)| {
            p == s
                || *p == "*"
                || p.strip_suffix("[*]").is_some_and(|name| {
                    s.strip_prefix(name)
                        .and_then(|r| r.strip_prefix('['))
                        .and_then(|r| r.strip_suffix(']'))
                        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
                })
        })
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} [{}] {:?}: KubeVirt {}; kvrs {} ({})",
            self.corpus,
            self.test,
            self.cases.join(", "),
            self.path,
            self.kubevirt,
            self.kvrs,
            self.why
        )
    }
}

/// The entries of the data file for some comparisons of one corpus, and how often each matched a
/// difference in this run.
#[derive(Debug)]
pub struct Deliberate {
    corpus: String,
    tests: Vec<String>,
    entries: Vec<Entry>,
    used: Vec<usize>,
}

impl Deliberate {
    /// The entries of `tests/deliberate-differences.json` for comparisons `tests` of `corpus`.
    /// Panics when the file is malformed or names a comparison not in [`COMPARISONS`].
    pub fn load(corpus: &str, tests: &[&str]) -> Self {
        Self::parse(FILE, corpus, tests).unwrap_or_else(|e| panic!("{FILE_NAME}: {e}"))
    }

    /// [`Deliberate::load`] from the file's text.
    pub fn parse(text: &str, corpus: &str, tests: &[&str]) -> Result<Self, String> {
        for t in tests {
            if !COMPARISONS.contains(&(corpus, *t)) {
                return Err(format!("comparison {corpus} {t} is not in COMPARISONS"));
            }
        }
        let all = parse_entries(text)?;
        let entries: Vec<Entry> = all
            .into_iter()
            .filter(|e| e.corpus == corpus && tests.contains(&e.test.as_str()))
            .collect();
        Ok(Self {
            corpus: corpus.into(),
            tests: tests.iter().map(|t| t.to_string()).collect(),
            used: vec![0; entries.len()],
            entries,
        })
    }

    /// The entry that makes difference `d` of scenario `case` deliberate, if any (recorded as used).
    pub fn check(&mut self, case: &str, d: &Difference) -> Option<&Entry> {
        assert!(
            self.tests.contains(&d.test),
            "difference of comparison {} outside this run's comparisons {:?}",
            d.test,
            self.tests
        );
        let i = self
            .entries
            .iter()
            .position(|e| e.test == d.test && e.covers(case, &d.path))?;
        self.used[i] += 1;
        Some(&self.entries[i])
    }

    /// The differences of `case` that no entry covers (the deliberate ones are counted).
    pub fn unexpected(&mut self, case: &str, diffs: Vec<Difference>) -> Vec<Difference> {
        diffs
            .into_iter()
            .filter(|d| self.check(case, d).is_none())
            .collect()
    }

    /// How many differences found so far were deliberate.
    pub fn deliberate_count(&self) -> usize {
        self.used.iter().sum()
    }

    /// The entries in scope that matched no difference so far.
    pub fn stale(&self) -> Vec<&Entry> {
        self.entries
            .iter()
            .zip(&self.used)
            .filter(|(_, n)| **n == 0)
            .map(|(e, _)| e)
            .collect()
    }

    /// `N differences deliberate (see tests/deliberate-differences.json)`: print it beside the
    /// comparison's match count.
    pub fn summary(&self) -> String {
        format!(
            "{} differences deliberate (see {FILE_NAME})",
            self.deliberate_count()
        )
    }

    /// The failure message for the stale entries in scope, if there are any.
    pub fn stale_report(&self) -> Option<String> {
        let stale = self.stale();
        if stale.is_empty() {
            return None;
        }
        let (n, pronoun) = if stale.len() == 1 {
            ("1 stale entry".to_string(), "it")
        } else {
            (format!("{} stale entries", stale.len()), "them")
        };
        Some(format!(
            "{n} in {FILE_NAME} for {} {:?} matched no difference in this run (kvrs now agrees \
             with KubeVirt there, or the path or case names changed); remove or fix {pronoun}:\n  {}",
            self.corpus,
            self.tests,
            stale
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n  ")
        ))
    }

    /// Panics when an entry in scope matched no difference: call at the end of the comparison.
    #[track_caller]
    pub fn finish(&self) {
        if let Some(report) = self.stale_report() {
            panic!("{report}");
        }
    }
}

fn field(o: &serde_json::Map<String, Value>, i: usize, key: &str) -> Result<String, String> {
    match o.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() || key == "path" => Ok(s.clone()),
        _ => Err(format!("entry {i}: `{key}` must be a non-empty string")),
    }
}

fn parse_entries(text: &str) -> Result<Vec<Entry>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let items = v
        .as_array()
        .ok_or("the file must be a JSON array of entries")?;
    let known = ["corpus", "test", "cases", "path", "kubevirt", "kvrs", "why"];
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let o = item
            .as_object()
            .ok_or_else(|| format!("entry {i} is not an object"))?;
        if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!("entry {i}: unknown field `{k}`"));
        }
        let cases: Vec<String> = match o.get("cases") {
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|c| c.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| format!("entry {i}: `cases` must be strings"))?,
            _ => return Err(format!("entry {i}: `cases` must be a non-empty list")),
        };
        let e = Entry {
            corpus: field(o, i, "corpus")?,
            test: field(o, i, "test")?,
            cases,
            path: field(o, i, "path")?,
            kubevirt: field(o, i, "kubevirt")?,
            kvrs: field(o, i, "kvrs")?,
            why: field(o, i, "why")?,
        };
        if !COMPARISONS.contains(&(e.corpus.as_str(), e.test.as_str())) {
            return Err(format!(
                "entry {i}: no comparison {} {} (see COMPARISONS in tests/support/deliberate.rs)",
                e.corpus, e.test
            ));
        }
        out.push(e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SAMPLE: &str = r#"[
      {"corpus": "oracle-vm", "test": "vm-final", "cases": ["vm-a"], "path": "/vm/spec/runStrategy",
       "kubevirt": "Halted", "kvrs": "Always", "why": "a reason"},
      {"corpus": "oracle-vm", "test": "vm-writes", "cases": ["*"], "path": "update virtualmachines",
       "kubevirt": "sends it", "kvrs": "does not", "why": "another reason"}
    ]"#;

    #[test]
    fn listed_differences_are_deliberate_and_others_are_not() {
        let mut d = Deliberate::parse(SAMPLE, "oracle-vm", &["vm-final", "vm-writes"]).unwrap();
        let listed = Difference::new(
            "vm-final",
            "/vm/spec/runStrategy",
            "\"Halted\"",
            "\"Always\"",
        );
        assert!(d.check("vm-a", &listed).is_some());
        // The same path in another case, another path in the same case: not deliberate.
        assert!(d.check("vm-b", &listed).is_none());
        let other = Difference::new("vm-final", "/vm/spec/running", "true", "absent");
        assert!(d.check("vm-a", &other).is_none());
        // A path inside the listed one is covered; a sibling sharing its prefix is not.
        let inside = Difference::new("vm-final", "/vm/spec/runStrategy/x", "1", "2");
        assert!(d.check("vm-a", &inside).is_some());
        let sibling = Difference::new("vm-final", "/vm/spec/runStrategyX", "1", "2");
        assert!(d.check("vm-a", &sibling).is_none());
        // "*" covers every case; the same path of another comparison is not covered.
        let write = Difference::new("vm-writes", "update virtualmachines", "sent", "absent");
        assert!(d.check("vm-anything", &write).is_some());
        let unexpected = d.unexpected("vm-a", vec![listed.clone(), other.clone()]);
        assert_eq!(unexpected, vec![other]);
        assert_eq!(d.deliberate_count(), 4);
        assert_eq!(
            d.summary(),
            format!("4 differences deliberate (see {FILE_NAME})")
        );
        assert_eq!(d.stale_report(), None);
    }

    #[test]
    fn wildcard_segments_stand_for_indices() {
        let text = r#"[
          {"corpus": "differential", "test": "defaulted", "cases": ["*"],
           "path": "/spec/volumes/*/persistentVolumeClaim/readOnly",
           "kubevirt": "a", "kvrs": "b", "why": "c"},
          {"corpus": "differential", "test": "domain", "cases": ["*"], "path": "/domain/cputune[*]",
           "kubevirt": "a", "kvrs": "b", "why": "c"}
        ]"#;
        let mut d = Deliberate::parse(text, "differential", &["defaulted", "domain"]).unwrap();
        let at = |test: &str, path: &str| Difference::new(test, path, "x", "y");
        let readonly = "/spec/volumes/3/persistentVolumeClaim/readOnly";
        assert!(d.check("g-1", &at("defaulted", readonly)).is_some());
        let other = "/spec/volumes/3/persistentVolumeClaim/claimName";
        assert!(d.check("g-1", &at("defaulted", other)).is_none());
        assert!(
            d.check("g-1", &at("domain", "/domain/cputune[11]/iothreadpin[2]"))
                .is_some()
        );
        assert!(
            d.check("g-1", &at("domain", "/domain/cputune[x]"))
                .is_none()
        );
        assert!(
            d.check("g-1", &at("domain", "/domain/cputunes[1]"))
                .is_none()
        );
        assert!(d.check("g-1", &at("domain", "/domain")).is_none());
    }

    #[test]
    fn an_entry_that_matched_nothing_is_reported_stale() {
        let mut d = Deliberate::parse(SAMPLE, "oracle-vm", &["vm-final", "vm-writes"]).unwrap();
        let write = Difference::new("vm-writes", "update virtualmachines", "sent", "absent");
        assert!(d.check("vm-a", &write).is_some());
        let stale = d.stale();
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].path, "/vm/spec/runStrategy");
        let err = d.stale_report().unwrap();
        assert!(err.contains("1 stale entry"), "{err}");
        assert!(err.contains("/vm/spec/runStrategy"), "{err}");
        // Out of scope entries are neither consulted nor stale.
        let d = Deliberate::parse(SAMPLE, "oracle-vm", &["vm-events"]).unwrap();
        assert!(d.stale().is_empty());
    }

    #[test]
    fn malformed_entries_and_unknown_comparisons_are_rejected() {
        let unknown = r#"[{"corpus": "oracle-vm", "test": "vm-typo", "cases": ["*"], "path": "",
            "kubevirt": "a", "kvrs": "b", "why": "c"}]"#;
        assert!(Deliberate::parse(unknown, "oracle-vm", &["vm-final"]).is_err());
        let no_why = r#"[{"corpus": "oracle-vm", "test": "vm-final", "cases": ["*"], "path": "",
            "kubevirt": "a", "kvrs": "b"}]"#;
        assert!(Deliberate::parse(no_why, "oracle-vm", &["vm-final"]).is_err());
        assert!(Deliberate::parse("[]", "oracle-vm", &["vm-typo"]).is_err());
    }

    #[test]
    fn the_data_file_parses_and_names_known_comparisons() {
        let entries = parse_entries(FILE).unwrap();
        assert!(!entries.is_empty());
    }

    #[test]
    fn json_differences_name_every_path() {
        let kubevirt = json!({"a": 1, "b": [1, 2], "c": {"d": true}});
        let kvrs = json!({"a": 2, "b": [1], "c": {"d": true}, "e": null});
        let paths: Vec<String> = json_differences("pod", "", &kubevirt, &kvrs)
            .into_iter()
            .map(|d| format!("{} {} {}", d.path, d.kubevirt, d.kvrs))
            .collect();
        assert_eq!(paths, ["/a 1 2", "/b/1 2 absent", "/e absent null"]);
    }

    #[test]
    fn alignment_pairs_earliest_matches() {
        let kubevirt = ["patch", "patch", "create"];
        let kvrs = ["patch", "create", "delete"];
        assert_eq!(
            align(&kubevirt, &kvrs, |a, b| a == b),
            [
                (Some(0), Some(0)),
                (Some(1), None),
                (Some(2), Some(1)),
                (None, Some(2))
            ]
        );
    }
}
