//! Trains the built-in MLP on a small 3-class problem in 2 ranks, continues
//! from its checkpoint, validates and predicts: `cargo run --example train`.

use std::fs;

use ddpspawn::Trainer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 200 samples: 4 features in [-1, 1), the class in the last column.
    let dir = std::env::temp_dir().join(format!("ddpspawn-train-example-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let train = dir.join("train.csv");
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut uniform = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let mut csv = String::new();
    for _ in 0..200 {
        let x = [uniform(), uniform(), uniform(), uniform()];
        let s = x[0] + x[1] - 0.5 * x[2];
        let class = if s < -0.4 {
            0
        } else if s < 0.4 {
            1
        } else {
            2
        };
        csv += &format!("{:.6},{:.6},{:.6},{:.6},{class}\n", x[0], x[1], x[2], x[3]);
    }
    fs::write(&train, csv)?;

    let trainer = Trainer::new("mlp:4,16,3")
        .nprocs(2)
        .option("max_epochs", 10)
        .option("lr", 0.1)
        .option("momentum", 0.9)
        .option("batch_size", 16)
        .option("progress", false)
        .default_root_dir(dir.join("logs"))
        .val(&train);
    let fit = trainer.fit(&train)?;
    println!(
        "epoch {:?}, step {:?}, val_accuracy {:?}",
        fit.epoch(),
        fit.global_step(),
        fit.metric("val_accuracy")
    );
    let checkpoint = fit.checkpoint().expect("fit returns its checkpoint");

    // Continue to epoch 20: weights, optimizer state, position and RNG restored.
    let more = trainer
        .clone()
        .option("max_epochs", 20)
        .resume_from(checkpoint)
        .fit(&train)?;
    let last = more.checkpoint().expect("fit returns its checkpoint");
    println!("resumed to epoch {:?}: {:?}", more.epoch(), more.metrics());

    let evaluator = Trainer::new("mlp:4,16,3")
        .nprocs(2)
        .default_root_dir(dir.join("logs"))
        .checkpoint(last);
    println!("validate: {:?}", evaluator.validate(&train)?.metrics());
    let predicted = evaluator.predict(&train)?;
    let classes: Vec<f64> = predicted
        .read_predictions()?
        .iter()
        .map(|row| row[0])
        .collect();
    println!(
        "{} predictions, first ten {:?}",
        classes.len(),
        &classes[..10]
    );
    fs::remove_dir_all(&dir)?;
    Ok(())
}
