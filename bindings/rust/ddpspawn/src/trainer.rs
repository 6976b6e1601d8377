// Training runs: the `Trainer` builder over ddpspawn_run (fit, validate, test,
// predict with the built-in MLP or a TorchScript model), the `Data` it reads
// and the `RunResult` rank 0 hands back (in `trainer/run_result.rs`).

use std::ffi::{CString, OsStr, OsString};
use std::fmt;
use std::io::Write;
use std::os::raw::c_char;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::Mutex;
use std::time::Duration;

use ddpspawn_sys as sys;

use crate::error::{c_str_to_string, last_error, to_c_string, Error, Result};

mod run_result;
pub use run_result::RunResult;

/// Runs are serialized within a process: each forks the whole process and
/// installs signal handlers while it waits.
static RUN_LOCK: Mutex<()> = Mutex::new(());

/// Option keys that the builder's own methods and arguments set.
const RESERVED: &[(&str, &str)] = &[
    ("model", "Trainer::new"),
    ("nproc_per_node", "Trainer::nprocs"),
    ("train", "the argument of fit"),
    ("train_labels", "Data::npy as the argument of fit"),
    ("val", "Trainer::val"),
    ("val_labels", "Data::npy in Trainer::val"),
    ("data", "the argument of validate, test or predict"),
    (
        "data_labels",
        "Data::npy as the argument of validate, test or predict",
    ),
];

/// A dataset: a CSV file (one sample per row, the label in the last column)
/// or NumPy `.npy` features with their labels in a second `.npy` file.
///
/// Paths convert: `trainer.fit("train.csv")`, `trainer.fit(Data::npy("x.npy",
/// "y.npy"))` or `trainer.fit(("x.npy", "y.npy"))`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Data {
    path: PathBuf,
    labels: Option<PathBuf>,
}

impl Data {
    /// A CSV file (or any file the library reads without a labels file).
    pub fn csv(path: impl Into<PathBuf>) -> Data {
        Data {
            path: path.into(),
            labels: None,
        }
    }

    /// `.npy` features (`[n, ...]`) and labels (`[n]` integers for a
    /// classifier, `[n]` or `[n, k]` floats for a regressor).
    pub fn npy(features: impl Into<PathBuf>, labels: impl Into<PathBuf>) -> Data {
        Data {
            path: features.into(),
            labels: Some(labels.into()),
        }
    }

    /// The data file (the features, for `.npy`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The labels file, for `.npy` data.
    pub fn labels(&self) -> Option<&Path> {
        self.labels.as_deref()
    }
}

impl From<&str> for Data {
    fn from(path: &str) -> Data {
        Data::csv(path)
    }
}

impl From<String> for Data {
    fn from(path: String) -> Data {
        Data::csv(path)
    }
}

impl From<&String> for Data {
    fn from(path: &String) -> Data {
        Data::csv(path)
    }
}

impl From<&Path> for Data {
    fn from(path: &Path) -> Data {
        Data::csv(path)
    }
}

impl From<PathBuf> for Data {
    fn from(path: PathBuf) -> Data {
        Data::csv(path)
    }
}

impl From<&PathBuf> for Data {
    fn from(path: &PathBuf) -> Data {
        Data::csv(path)
    }
}

impl From<&Data> for Data {
    fn from(data: &Data) -> Data {
        data.clone()
    }
}

/// `(features.npy, labels.npy)`.
impl<A: Into<PathBuf>, B: Into<PathBuf>> From<(A, B)> for Data {
    fn from((features, labels): (A, B)) -> Data {
        Data::npy(features, labels)
    }
}

/// Trains, validates, tests or predicts with a model, in `nprocs` ranks
/// forked from this process (DDP on CPU, Gloo), through `ddpspawn_run`.
///
/// The model is `"mlp:IN,HIDDEN...,OUT"` (built in: several outputs make it a
/// classifier, whose labels must be integers, reporting `val_loss` and
/// `val_accuracy`; one output per label a regressor) or the path of a TorchScript file whose exported
/// `training_step(self, batch: List[Tensor], batch_idx: int) -> Tensor` (and
/// optionally `validation_step` / `test_step` returning `Dict[str, Tensor]`,
/// `predict_step` returning `Tensor`) the library runs; `batch` is
/// `[features, labels]`.
///
/// Options are the ddpspawn CLI's flags (`ddpspawn --help`), e.g.
/// `max_epochs`, `batch_size` (per rank), `lr`, `optimizer` (`sgd`, `adam`,
/// `adamw`, `rmsprop`, `adagrad`), `momentum`, `betas`, `eps`, `seed`, `default_root_dir` (where `metrics.csv`,
/// `checkpoints/last.ckpt` and `predictions.csv` go; default
/// `ddpspawn_logs`), `resume_from`, `checkpoint`. The builder only records
/// them; the library checks the data, the model and every option before
/// any process starts, and a bad one is an [`Error::InvalidArgument`] that
/// names it. A rank that fails while running is an [`Error::WorkerFailed`]
/// that names the rank, whose message holds the rank's error and whose
/// [`Report`](crate::Report) says how every rank ended (as a
/// [`Launcher`](crate::Launcher)'s does; a timeout or an interrupt carries
/// one too).
///
/// The terminal methods ([`fit`](Trainer::fit), [`validate`](Trainer::validate),
/// [`test`](Trainer::test), [`predict`](Trainer::predict)) block until every
/// rank ended, and a `Trainer` can run any number of them. Runs in one
/// process take turns. The ranks are forked copies of this process that run
/// only the library's code; start runs while no other thread of yours is
/// inside LibTorch.
///
/// ```no_run
/// use ddpspawn::Trainer;
/// # fn main() -> ddpspawn::Result<()> {
/// let trainer = Trainer::new("mlp:4,16,3")
///     .nprocs(2)
///     .option("max_epochs", 10)
///     .option("lr", 0.1)
///     .default_root_dir("logs")
///     .val("val.csv");
/// let fit = trainer.fit("train.csv")?;
/// println!("val_accuracy {:?}", fit.metric("val_accuracy"));
/// let checkpoint = fit.checkpoint().expect("fit returns a checkpoint");
/// // Continue to epoch 20 with the optimizer state intact:
/// let more = trainer.clone().option("max_epochs", 20).resume_from(checkpoint).fit("train.csv")?;
/// let classes = Trainer::new("mlp:4,16,3").checkpoint(checkpoint).predict("new.csv")?;
/// println!("{:?}", classes.read_predictions()?);
/// # let _ = more;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Trainer runs nothing until fit, validate, test or predict"]
pub struct Trainer {
    model: OsString,
    nprocs: Option<usize>,
    val: Option<Data>,
    options: Vec<(String, OsString)>,
}

impl Trainer {
    /// A trainer for `model`: `"mlp:IN,HIDDEN...,OUT"` or a TorchScript
    /// file. One rank until [`nprocs`](Trainer::nprocs) says otherwise.
    pub fn new(model: impl AsRef<OsStr>) -> Trainer {
        Trainer {
            model: model.as_ref().to_os_string(),
            nprocs: None,
            val: None,
            options: Vec::new(),
        }
    }

    /// Number of ranks (at least 1; 0 is rejected by the terminal methods).
    /// Under torchrun or srun this process is one rank of that job, which
    /// sets the number; a different `nprocs` is an error.
    pub fn nprocs(mut self, nprocs: usize) -> Trainer {
        self.nprocs = Some(nprocs);
        self
    }

    /// Sets option `key` (a CLI flag, `max_epochs` or `max-epochs`) to
    /// `value`'s text: `.option("max_epochs", 5)`, `.option("lr", 0.1)`,
    /// `.option("shuffle", false)`. A later call with the same key replaces
    /// the value. An empty key, a key with `=` or a NUL byte is an
    /// [`Error::InvalidArgument`] from the terminal method, and so is a key
    /// that the builder sets itself (`model`, `nproc_per_node`, the data).
    pub fn option(self, key: impl Into<String>, value: impl fmt::Display) -> Trainer {
        self.option_os(key, value.to_string())
    }

    /// [`option`](Trainer::option) with a value that may not be UTF-8 (a
    /// path).
    pub fn option_os(mut self, key: impl Into<String>, value: impl AsRef<OsStr>) -> Trainer {
        let key = key.into().replace('-', "_");
        let value = value.as_ref().to_os_string();
        match self.options.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.options.push((key, value)),
        }
        self
    }

    /// Validation data for [`fit`](Trainer::fit), run every
    /// `check_val_every_n_epoch` epochs.
    pub fn val(mut self, data: impl Into<Data>) -> Trainer {
        self.val = Some(data.into());
        self
    }

    /// Weights to start from (option `checkpoint`), e.g. a fit's
    /// [`RunResult::checkpoint`] for validate, test or predict.
    pub fn checkpoint(self, path: impl AsRef<Path>) -> Trainer {
        self.option_os("checkpoint", path.as_ref())
    }

    /// A checkpoint to continue a fit from (option `resume_from`): weights,
    /// optimizer state, position and random generators. `max_epochs` still
    /// counts from the start.
    pub fn resume_from(self, path: impl AsRef<Path>) -> Trainer {
        self.option_os("resume_from", path.as_ref())
    }

    /// Where `metrics.csv`, `checkpoints/last.ckpt` and `predictions.csv`
    /// go (option `default_root_dir`; default `ddpspawn_logs`).
    pub fn default_root_dir(self, path: impl AsRef<Path>) -> Trainer {
        self.option_os("default_root_dir", path.as_ref())
    }

    /// Each collective's limit, as Lightning's `timeout` (option `timeout`;
    /// default 1800 s): a rank that does not arrive in time ends the run with
    /// an [`Error::Timeout`] naming it and what every rank was last doing.
    pub fn timeout(self, timeout: Duration) -> Trainer {
        self.option("timeout", timeout.as_secs_f64())
    }

    /// Lightning's `max_time` (option `max_time`): fit stops after the first
    /// optimizer step past it, writes its checkpoint and succeeds.
    pub fn max_time(self, limit: Duration) -> Trainer {
        self.option("max_time", limit.as_secs_f64())
    }

    /// Trains on `train` (and [`val`](Trainer::val), if set). The result has
    /// `checkpoint`, `metrics_csv`, `epoch`, `global_step` and
    /// `metric.<name>` for the last value of every logged metric.
    pub fn fit(&self, train: impl Into<Data>) -> Result<RunResult> {
        let train = train.into();
        let mut data = vec![("train", &train)];
        if let Some(val) = &self.val {
            data.push(("val", val));
        }
        self.run("fit", &data)
    }

    /// Validates on `data`; the result has `metric.<name>` (e.g. `val_loss`,
    /// `val_accuracy`), averaged over the dataset and the ranks.
    pub fn validate(&self, data: impl Into<Data>) -> Result<RunResult> {
        self.run("validate", &[("data", &data.into())])
    }

    /// Tests on `data` (`test_step`; a TorchScript module without one uses
    /// `validation_step`): `metric.test_loss`, `metric.test_accuracy` ...
    pub fn test(&self, data: impl Into<Data>) -> Result<RunResult> {
        self.run("test", &[("data", &data.into())])
    }

    /// Predicts every sample of `data`. The result's `predictions` is a CSV
    /// file with one row per sample in dataset order (for the built-in
    /// classifier, the predicted class), read by
    /// [`RunResult::read_predictions`]; `count` is the number of rows.
    pub fn predict(&self, data: impl Into<Data>) -> Result<RunResult> {
        self.run("predict", &[("data", &data.into())])
    }

    /// The `key=value` entries of a run, checked.
    fn entries(&self, data: &[(&str, &Data)]) -> Result<Vec<CString>> {
        if self.nprocs == Some(0) {
            return Err(Error::invalid("nprocs must be at least 1"));
        }
        let mut entries = vec![entry("model", self.model.as_bytes())?];
        for (name, data) in data {
            entries.push(entry(name, data.path.as_os_str().as_bytes())?);
            if let Some(labels) = &data.labels {
                entries.push(entry(
                    &format!("{name}_labels"),
                    labels.as_os_str().as_bytes(),
                )?);
            }
        }
        if let Some(nprocs) = self.nprocs {
            entries.push(entry("nproc_per_node", nprocs.to_string().as_bytes())?);
        }
        for (key, value) in &self.options {
            if key.is_empty() || key.contains('=') {
                return Err(Error::invalid(format!(
                    "option name {key:?} is empty or contains '='"
                )));
            }
            if let Some((_, instead)) = RESERVED.iter().find(|(k, _)| k == key) {
                return Err(Error::invalid(format!(
                    "option {key} is set by {instead}, not by option()"
                )));
            }
            entries.push(entry(key, value.as_bytes())?);
        }
        Ok(entries)
    }

    fn run(&self, command: &str, data: &[(&str, &Data)]) -> Result<RunResult> {
        crate::check_abi_version()?;
        let entries = self.entries(data)?;
        let command = to_c_string("command", command)?;
        let mut pointers: Vec<*const c_char> = entries.iter().map(|e| e.as_ptr()).collect();
        pointers.push(ptr::null());

        let _turn = RUN_LOCK
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // What is buffered now would otherwise come after the ranks' output.
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        let mut raw: *mut sys::ddpspawn_run_result = ptr::null_mut();
        // SAFETY: the command and every entry are valid C strings, the array
        // is NULL-terminated, and all outlive the call. The forked ranks
        // never return from it.
        let status = unsafe { sys::ddpspawn_run(command.as_ptr(), pointers.as_ptr(), &mut raw) };
        if status != sys::DDPSPAWN_OK {
            // Read the message before any other ddpspawn call replaces it.
            let mut error = Error::from_code(status, last_error());
            // How every rank ended, as a Launcher's error carries it.
            if let Ok(report) = crate::launcher::last_run_report() {
                error.attach_report(report);
            }
            return Err(error);
        }
        let handle = NonNull::new(raw)
            .map(ResultHandle)
            .ok_or_else(|| Error::Internal {
                message: "ddpspawn_run returned OK and no result".to_string(),
            })?;
        let result = handle.0.as_ptr();
        // SAFETY: a live result; the strings it owns are copied at once, and
        // every index is below its count.
        let (text, pairs) = unsafe {
            let pairs = (0..sys::ddpspawn_run_result_count(result))
                .map(|i| {
                    (
                        c_str_to_string(sys::ddpspawn_run_result_key(result, i)),
                        c_str_to_string(sys::ddpspawn_run_result_value(result, i)),
                    )
                })
                .collect();
            (
                c_str_to_string(sys::ddpspawn_run_result_text(result)),
                pairs,
            )
        };
        Ok(RunResult { text, pairs })
    }
}

/// `key=value`, checked for NUL bytes.
fn entry(key: &str, value: &[u8]) -> Result<CString> {
    let mut bytes = Vec::with_capacity(key.len() + 1 + value.len());
    bytes.extend_from_slice(key.as_bytes());
    bytes.push(b'=');
    bytes.extend_from_slice(value);
    to_c_string(&format!("option {key}"), bytes)
}

/// Owns a `ddpspawn_run_result`.
struct ResultHandle(NonNull<sys::ddpspawn_run_result>);

impl Drop for ResultHandle {
    fn drop(&mut self) {
        // SAFETY: returned by ddpspawn_run, destroyed once.
        unsafe { sys::ddpspawn_run_result_destroy(self.0.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn entries_are_checked_before_any_call() {
        let data = Data::csv("train.csv");
        let check = |t: Trainer| t.entries(&[("train", &data)]).map(|_| ()).unwrap_err();
        for (trainer, what) in [
            (Trainer::new("mlp:4,3").nprocs(0), "nprocs"),
            (Trainer::new("mlp:4,\u{0}3"), "option model"),
            (
                Trainer::new("mlp:4,3").option("lr", "0.\u{0}1"),
                "option lr",
            ),
            (Trainer::new("mlp:4,3").option("", 1), "empty"),
            (Trainer::new("mlp:4,3").option("a=b", 1), "'='"),
            (
                Trainer::new("mlp:4,3").option("nproc-per-node", 2),
                "Trainer::nprocs",
            ),
            (
                Trainer::new("mlp:4,3").option("train_labels", "y.npy"),
                "Data::npy",
            ),
        ] {
            let err = check(trainer);
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
            assert!(err.message().contains(what), "{err}");
        }
        let entries = Trainer::new("mlp:4,3")
            .nprocs(2)
            .option("max-epochs", 3)
            .option("max_epochs", 5)
            .option("shuffle", false)
            .entries(&[("train", &Data::npy("x.npy", "y.npy"))])
            .unwrap();
        let text: Vec<_> = entries.iter().map(|e| e.to_str().unwrap()).collect();
        assert_eq!(
            text,
            [
                "model=mlp:4,3",
                "train=x.npy",
                "train_labels=y.npy",
                "nproc_per_node=2",
                "max_epochs=5",
                "shuffle=false"
            ]
        );
    }
}
