//! Every run option that docs/options.md says Rust's `Trainer` takes ("yes"
//! in the table's Rust column) reaches the library through `.option(name,
//! value)`: given a value no option accepts (`not-a-value`), each one is
//! either refused by an error that names it, or taken, and then rank 0's
//! `<default_root_dir>/hparams.yaml` (the CSV logger's record of the given
//! options) holds `name: 'not-a-value'`. `default_root_dir` itself is checked
//! by the `hparams.yaml` a fit writes there. An option the binding dropped or
//! renamed on the way fails here.
//!
//! The table is read from `$DDPSPAWN_OPTIONS_MD` (run_tests.sh sets it to the
//! repository's docs/options.md). Every option is checked, and the failures
//! are reported together, so one run shows all of them.
//!
//! Every option the table gives `ddpspawn-tch` (whose cells name
//! `ReducerBuilder` methods) shows its effect in one reduction on two ranks.
//!
//! This binary has its own `main` (`harness = false` in Cargo.toml): the
//! library forks the ranks from the calling process, which must not have
//! libtest's test threads running beside it. The only other thread is a
//! watchdog that sleeps until [`TIME_LIMIT`] and then aborts the process,
//! naming the option it was stuck on, so a hung run fails in bounded time.

mod common;
#[path = "train/support.rs"]
#[allow(dead_code)]
mod support;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ddpspawn::{Error, Trainer};

/// Where the option table is (an absolute path: cargo runs a test binary in
/// its package's directory).
const OPTIONS_MD: &str = "DDPSPAWN_OPTIONS_MD";

/// The built-in classifier of the data [`support::samples`] writes.
const MLP: &str = "mlp:4,16,3";
/// One rank (`support::trainer`, not used here, reads it too).
const NPROCS: usize = 1;
/// The value no option accepts.
const BAD: &str = "not-a-value";
/// The whole run's bound: about 90 fits of one epoch on 64 samples, almost
/// all refused before any rank starts, take about a second.
const TIME_LIMIT: Duration = Duration::from_secs(120);
/// Fewer options in the Rust column than this means the table was misread.
const MIN_OPTIONS: usize = 60;

/// The test: it gets a fresh directory of its own.
type Test = fn(&Path);

fn main() {
    let tests: &[(&str, Test)] = &[
        (
            "every_rust_option_reaches_the_library",
            every_rust_option_reaches_the_library,
        ),
        (
            "every_tch_option_has_its_effect",
            every_tch_option_has_its_effect,
        ),
    ];
    common::run_tests_in_dirs("front_end_options", tests);
}

// --- The table ------------------------------------------------------------------

/// The cells of a Markdown table row, trimmed: `|` splits them, `\|` is a
/// `|` inside a cell.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cells.last_mut().unwrap().push('|');
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().unwrap().push(c),
        }
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

/// Each option's name and its cell in the column headed `column`, in the
/// table's order.
fn column(table: &str, column: &str) -> Vec<(String, String)> {
    let header = table
        .lines()
        .map(cells)
        .find(|row| row.first().map(String::as_str) == Some("Option"))
        .expect("no table header (a row whose first cell is `Option`)");
    let at = header
        .iter()
        .position(|c| c == column)
        .unwrap_or_else(|| panic!("no `{column}` column in the header {header:?}"));
    table
        .lines()
        .map(cells)
        .filter(|row| row.first().map_or(false, |c| c.starts_with('`')))
        .map(|row| {
            (
                row[0].trim_matches('`').to_string(),
                row.get(at).cloned().unwrap_or_default(),
            )
        })
        .collect()
}

/// The options of `table` (docs/options.md's text) whose Rust cell is `yes`.
fn rust_options(table: &str) -> Vec<String> {
    column(table, "Rust")
        .into_iter()
        .filter(|(_, cell)| cell == "yes")
        .map(|(name, _)| name)
        .collect()
}

/// The `ReducerBuilder` methods the `ddpspawn-tch` column names (a cell that
/// is empty or says "no: ..." claims none), sorted.
fn tch_options(table: &str) -> Vec<String> {
    let mut names: Vec<String> = column(table, "`ddpspawn-tch`")
        .into_iter()
        .filter(|(_, cell)| !cell.is_empty() && !cell.starts_with("no"))
        .map(|(_, cell)| cell.trim_matches('`').to_string())
        .collect();
    names.sort();
    names
}

/// `word` occurs in `text` with no letter, digit or `_` either side.
fn contains_word(text: &str, word: &str) -> bool {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.map_or(false, is_word) && !after.map_or(false, is_word)
    })
}

/// The error's text and every rank's error text it carries.
fn error_text(err: &Error) -> String {
    let mut text = err.to_string();
    if let Some(report) = err.report() {
        for rank in report.ranks().iter().filter(|r| !r.error.is_empty()) {
            text += &format!("\n  rank {}: {}", rank.rank, rank.error);
        }
    }
    text
}

/// The path and text of the option table.
fn read_table() -> (PathBuf, String) {
    let path = env::var_os(OPTIONS_MD)
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "{OPTIONS_MD} is not set: set it to the absolute path of the repository's \
             docs/options.md (bindings/rust/run_tests.sh does)"
            )
        });
    let path = PathBuf::from(path);
    let table = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{OPTIONS_MD}={}: cannot read it: {e}", path.display()));
    (path, table)
}

// --- The tests ------------------------------------------------------------------

/// What one option's fit showed.
enum Seen {
    /// Refused: the error's text.
    Refused(String),
    /// Taken: the `hparams.yaml` line that holds it.
    Taken(String),
}

/// Ends the process if the run is not over by [`TIME_LIMIT`], naming the
/// option then being checked (`current` indexes `names`).
fn watchdog(names: Vec<String>, current: Arc<AtomicUsize>) {
    let start = Instant::now();
    thread::Builder::new()
        .name("watchdog".to_string())
        .spawn(move || {
            thread::sleep(TIME_LIMIT);
            let at = current.load(Ordering::SeqCst);
            let name = names.get(at).map_or("(none)", String::as_str);
            eprintln!(
                "front_end_options: not done after {:?} (limit {TIME_LIMIT:?}); option {} of {} \
                 ({name}) is still running; ending the test",
                start.elapsed(),
                at + 1,
                names.len()
            );
            println!("\ntest result: FAILED. 0 passed; 1 failed\n");
            // Not exit(): its handlers (LibTorch's static destructors) would
            // run beside the main thread. The ranks die with this process.
            process::abort();
        })
        .expect("start the watchdog");
}

fn every_rust_option_reaches_the_library(dir: &Path) {
    // The helpers on what the table and the errors hold.
    assert_eq!(
        cells(r"| `a` | `x\|y` (x) |  | yes |"),
        ["`a`", "`x|y` (x)", "", "yes"]
    );
    assert!(contains_word(
        "invalid argument: mode: 'x' is not auto|min|max",
        "mode"
    ));
    assert!(contains_word("--mode", "mode") && contains_word("mode", "mode"));
    assert!(!contains_word("early_stopping_mode: bad", "mode"));
    assert!(!contains_word("modes", "mode") && !contains_word("lr_min", "lr"));

    let (path, table) = read_table();
    let names = rust_options(&table);
    assert!(
        names.len() > MIN_OPTIONS,
        "only {} options with `yes` in the Rust column of {} (more than {MIN_OPTIONS} \
         expected): is the table's format what this test parses? {names:?}",
        names.len(),
        path.display()
    );

    let train = dir.join("train.csv");
    support::write_csv(&train, &support::samples(64, 1));
    let trainer = |root: &Path| {
        Trainer::new(MLP)
            .nprocs(NPROCS)
            .option("max_epochs", 1)
            .option("batch_size", 16)
            .option("progress", false)
            .default_root_dir(root)
    };

    let current = Arc::new(AtomicUsize::new(0));
    watchdog(names.clone(), Arc::clone(&current));
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut failures = Vec::new();
    for (i, name) in names.iter().enumerate() {
        current.store(i, Ordering::SeqCst);
        let root = dir.join(name);
        let hparams = root.join("hparams.yaml");
        if name == "default_root_dir" {
            match trainer(&root).fit(&train) {
                Ok(_) if hparams.is_file() => {
                    seen.push((name, Seen::Taken(format!("{} exists", hparams.display()))));
                }
                Ok(_) => failures.push(format!(
                    "{name}: the fit succeeded and wrote no {}",
                    hparams.display()
                )),
                Err(err) => failures.push(format!(
                    "{name}: a fit with a good {name} failed: {}",
                    error_text(&err)
                )),
            }
            continue;
        }
        match trainer(&root).option(name.as_str(), BAD).fit(&train) {
            Err(err) => {
                let text = error_text(&err);
                if contains_word(&text, name) {
                    seen.push((name, Seen::Refused(text)));
                } else {
                    failures.push(format!(
                        "{name}: refused {BAD:?} with an error that does not name it: {text}"
                    ));
                }
            }
            Ok(_) => {
                let line = format!("{name}: '{BAD}'");
                match fs::read_to_string(&hparams) {
                    Ok(yaml) if yaml.lines().any(|l| l == line) => {
                        seen.push((name, Seen::Taken(line)));
                    }
                    Ok(yaml) => failures.push(format!(
                        "{name}: took {BAD:?} (the fit succeeded), but {} has no line \
                         {line:?}:\n{yaml}",
                        hparams.display()
                    )),
                    Err(e) => failures.push(format!(
                        "{name}: took {BAD:?} (the fit succeeded), but {} cannot be read: {e}",
                        hparams.display()
                    )),
                }
            }
        }
    }
    let elapsed = started.elapsed();

    for (name, what) in &seen {
        match what {
            Seen::Refused(text) => {
                let first = text.lines().next().unwrap_or("");
                println!("refused {name}: {first}");
            }
            Seen::Taken(line) => println!("taken   {name}: {line}"),
        }
    }
    let refused = seen
        .iter()
        .filter(|(_, s)| matches!(s, Seen::Refused(_)))
        .count();
    println!(
        "{} options in the Rust column: {refused} refused {BAD:?} naming the option, {} taken \
         into hparams.yaml, {} failed; {elapsed:.1?}",
        names.len(),
        seen.len() - refused,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of the {} options that docs/options.md gives Rust's Trainer were refused by an \
         error that does not name them, or taken without their line in hparams.yaml:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
}

/// Every option the table gives `ddpspawn-tch` changes what one reduction on
/// two ranks leaves (the worker fixture's `reducer options` case observes it
/// at the default and given); the fixture observes no option the table does
/// not claim.
fn every_tch_option_has_its_effect(_dir: &Path) {
    let (path, table) = read_table();
    let claimed = tch_options(&table);
    assert!(
        claimed.iter().any(|o| o == "comm_hook"),
        "no comm_hook in the ddpspawn-tch column of {}: is the table's format what this test \
         parses? {claimed:?}",
        path.display()
    );
    let report = common::run(2, &["reducer", "options"]).expect("reducer options with 2 ranks");
    let summary = String::from_utf8(report.into_result().expect("rank 0 returns a summary"))
        .expect("utf-8 summary");
    let mut observed: Vec<String> = Vec::new();
    let mut failures = Vec::new();
    for line in summary.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "not name<TAB>default<TAB>given: {line:?}");
        println!("{}: default {} / given {}", fields[0], fields[1], fields[2]);
        if fields[1] == fields[2] {
            failures.push(format!("{}: no effect: {}", fields[0], fields[1]));
        }
        observed.push(fields[0].to_string());
    }
    observed.sort();
    assert_eq!(
        claimed, observed,
        "the options docs/options.md gives ddpspawn-tch, and those the fixture observes"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
