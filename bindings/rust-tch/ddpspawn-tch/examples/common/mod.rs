//! What the digits examples share: the handwritten digits of tools/fetch_digits (train.csv and
//! test.csv, 64 pixel values then the label a row), the network they train and its held-out
//! accuracy.

#![allow(dead_code)] // each example uses some of it

use tch::nn::{self, Module};
use tch::Tensor;

/// Features (n x 64) and labels (n) of a CSV file with the label last.
pub fn read_csv(path: &str) -> (Tensor, Tensor) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (mut features, mut labels) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let values: Vec<f32> = line
            .split(',')
            .map(|v| v.trim().parse().expect("a number"))
            .collect();
        let (label, row) = values.split_last().expect("a row");
        features.extend_from_slice(row);
        labels.push(*label as i64);
    }
    let rows = labels.len() as i64;
    (
        Tensor::from_slice(&features).view([rows, -1]),
        Tensor::from_slice(&labels),
    )
}

/// 64 pixels, a hidden layer of 64, 10 classes.
pub fn digits_net(vs: &nn::VarStore) -> impl Module {
    let root = vs.root();
    nn::seq()
        .add(nn::linear(&root / "hidden", 64, 64, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::linear(&root / "out", 64, 10, Default::default()))
}

/// "accuracy A on N held-out rows" of `net` on DIR/test.csv.
pub fn test_accuracy(net: &impl Module, dir: &str) -> String {
    let (x, y) = read_csv(&format!("{dir}/test.csv"));
    let accuracy = tch::no_grad(|| net.forward(&x).accuracy_for_logits(&y));
    format!(
        "accuracy {:.4} on {} held-out rows",
        accuracy.double_value(&[]),
        y.size()[0]
    )
}

/// The directory of the digits: the first argument, else data/digits.
pub fn digits_dir() -> String {
    std::env::args()
        .nth(1)
        .unwrap_or_else(|| "data/digits".to_string())
}
