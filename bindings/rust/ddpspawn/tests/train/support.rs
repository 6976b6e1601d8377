//! Helpers of `tests/train.rs`: the data the tests write (CSV and `.npy`), the
//! trainer settings they share, and what only a Python with torch does here.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ddpspawn::{Error, ErrorKind, RunResult, Trainer};

use crate::NPROCS;

/// A small deterministic generator (xorshift64*), uniform in [-1, 1).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        bits as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// A learnable 3-class rule of 4 features.
pub(crate) fn class_of(x: &[f64]) -> i64 {
    let s = x[0] + x[1] - 0.5 * x[2];
    if s < -0.4 {
        0
    } else if s < 0.4 {
        1
    } else {
        2
    }
}

/// `n` samples of 4 features in [-1, 1) and their classes.
pub(crate) fn samples(n: usize, seed: u64) -> Vec<([f64; 4], i64)> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..n)
        .map(|_| {
            let x = [rng.uniform(), rng.uniform(), rng.uniform(), rng.uniform()];
            // Features as the CSV holds them, so the label matches them.
            let x = x.map(|v| (v * 1e6).round() / 1e6);
            (x, class_of(&x))
        })
        .collect()
}

pub(crate) fn write_csv(path: &Path, rows: &[([f64; 4], i64)]) {
    let mut text = String::new();
    for (x, label) in rows {
        text += &format!("{:.6},{:.6},{:.6},{:.6},{label}\n", x[0], x[1], x[2], x[3]);
    }
    fs::write(path, text).expect("write a CSV");
}

/// A NumPy 1.0 file: the header, padded to a multiple of 64 bytes, then `data`.
pub(crate) fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    fs::write(path, bytes).expect("write a .npy");
}

/// train.csv (200 samples) and val.csv (100) in `dir`.
pub(crate) fn data(dir: &Path) -> (PathBuf, PathBuf) {
    let (train, val) = (dir.join("train.csv"), dir.join("val.csv"));
    write_csv(&train, &samples(200, 1));
    write_csv(&val, &samples(100, 2));
    (train, val)
}

/// The settings every run of the built-in classifier here shares.
pub(crate) fn trainer(dir: &Path, model: &str) -> Trainer {
    Trainer::new(model)
        .nprocs(NPROCS)
        .option("lr", 0.1)
        .option("momentum", 0.9)
        .option("batch_size", 16)
        .option("seed", 0)
        .option("progress", false)
        .timeout(Duration::from_secs(240))
        .default_root_dir(dir)
}

pub(crate) fn ok(result: ddpspawn::Result<RunResult>) -> RunResult {
    result.unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + 1e-12
}

/// A Python with torch, for what only torch does here (script a module, read
/// a checkpoint's tensors). Tried in order: `$DDPSPAWN_PYTHON`, tools/setup's
/// virtual environment (`$DDPSPAWN_VENV`, default /opt/ddpspawn/venv), then
/// `python3` on PATH and /usr/bin/python3. Err says what each one gave.
pub(crate) fn python_with_torch() -> Result<PathBuf, String> {
    let venv = env::var_os("DDPSPAWN_VENV")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/opt/ddpspawn/venv"), PathBuf::from);
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(python) = env::var_os("DDPSPAWN_PYTHON").filter(|v| !v.is_empty()) {
        candidates.push(PathBuf::from(python));
    }
    candidates.push(venv.join("bin").join("python3"));
    candidates.push(PathBuf::from("python3"));
    candidates.push(PathBuf::from("/usr/bin/python3"));
    let mut tried = Vec::new();
    for python in candidates {
        match Command::new(&python).args(["-c", "import torch"]).output() {
            Ok(out) if out.status.success() => return Ok(python),
            Ok(out) => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let last = stderr.lines().last().unwrap_or("").to_string();
                tried.push(format!("{}: {last}", python.display()));
            }
            Err(e) => tried.push(format!("{}: {e}", python.display())),
        }
    }
    Err(format!(
        "no Python with torch (tried {}); set DDPSPAWN_PYTHON to one, or run tools/setup",
        tried.join("; ")
    ))
}

/// Reads two ddpspawn checkpoints with torch (checking a format-2 header's
/// size and CRC-32 first; a format-1 file is the bare archive) and compares
/// their weights (`model.*`) and RNG states (`rng.*`) exactly: each name with
/// whether the two hold the same tensor (a name in one only is not).
const COMPARE_CHECKPOINTS: &str = r#"
import io, sys, zlib, torch

def archive(path):
    data = open(path, "rb").read()
    if data.startswith(b"PK\x03\x04"):
        return data
    header, _, body = data.partition(b"\n")
    magic, crc, size = header.decode().split(" ")
    assert magic == "ddpspawn-checkpoint-2", (path, header)
    assert len(body) == int(size.removeprefix("size=")), (path, header)
    assert zlib.crc32(body) == int(crc.removeprefix("crc32="), 16), (path, header)
    return body

a, b = (torch.jit.load(io.BytesIO(archive(p))).state_dict() for p in sys.argv[1:3])
for name in sorted(n for n in set(a) | set(b) if n.startswith(("model.", "rng."))):
    same = name in a and name in b and torch.equal(a[name], b[name])
    print("same" if same else "differs", name)
"#;

pub(crate) fn compare_checkpoints(python: &Path, a: &Path, b: &Path) -> Vec<(String, bool)> {
    let out = Command::new(python)
        .args(["-c", COMPARE_CHECKPOINTS])
        .args([a, b])
        .output()
        .expect("run Python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "reading {} and {} with torch: {}\n{stdout}{}",
        a.display(),
        b.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|line| match line.split_once(' ') {
            Some(("same", name)) => (name.to_string(), true),
            Some(("differs", name)) => (name.to_string(), false),
            _ => panic!("unexpected line from the comparison: {line:?}"),
        })
        .collect()
}

/// A TorchScript module without training_step, written by Python's torch
/// (torch.jit.script reads the class's source: a file). Err: no Python with
/// torch.
pub(crate) fn script_without_training_step(path: &Path) -> Result<(), String> {
    let python = python_with_torch()?;
    let script = path.with_extension("py");
    let code = "import sys, torch\n\
                class M(torch.nn.Module):\n\
                \x20   def __init__(self):\n\
                \x20       super().__init__()\n\
                \x20       self.linear = torch.nn.Linear(4, 3)\n\
                \x20   def forward(self, x):\n\
                \x20       return self.linear(x)\n\
                torch.jit.script(M()).save(sys.argv[1])\n";
    fs::write(&script, code).expect("write a script");
    let out = Command::new(&python)
        .arg(&script)
        .arg(path)
        .output()
        .expect("run Python");
    assert!(
        out.status.success(),
        "{} {} failed: {}",
        python.display(),
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

pub(crate) fn expect_invalid(result: ddpspawn::Result<RunResult>, needle: &str) -> Error {
    let err = match result {
        Ok(result) => panic!("expected an error about {needle:?}, got {}", result.text()),
        Err(err) => err,
    };
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.message().contains(needle), "{needle:?} not in: {err}");
    err
}
