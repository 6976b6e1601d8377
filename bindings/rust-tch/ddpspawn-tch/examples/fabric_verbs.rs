//! Checks of `ddpspawn_tch::Fabric`'s verbs beyond the conformance loop, on 2 ranks; exits 1 with
//! the reason when one fails. Run without an argument: the verbs refuse to run outside `launch`,
//! and in another launcher's job (`MASTER_ADDR`, `RANK`, `WORLD_SIZE`) two processes each join as
//! their rank; in the ranks, the collectives' values (the
//! mean, the sum, the gathered tensor, both broadcasts) and `clip_gradient_values`; the checkpoint
//! calls' refusals (a repeated name, no tensor, another shape or kind, a missing name), each
//! named, with nothing written; `log` (rank 0's rows alone in the Trainer's metrics.csv, a comma
//! in a name refused); a job whose rank 1 has a NaN gradient at `clip_gradients` fails, naming
//! rank 1 and the variable, and a rank that panics fails the job with its message. Each job runs
//! this program with its mode as the argument (and its ranks rerun it so).

use ddpspawn::ReduceOp;
use ddpspawn_tch::Fabric;
use std::error::Error;
use tch::nn::{self, Module};
use tch::{Kind, Tensor};

fn collectives(fabric: &Fabric) -> Result<String, Box<dyn Error>> {
    let mine = Tensor::from_slice(&[fabric.global_rank() as f32 + 1.0]);
    let mean = fabric.all_reduce(&mine, ReduceOp::Mean)?.double_value(&[0]);
    let sum = fabric.all_reduce(&mine, ReduceOp::Sum)?.double_value(&[0]);
    let gathered = fabric.all_gather(&mine.view([1, 1]))?;
    let from_1 = fabric.broadcast(&mine, 1)?.double_value(&[0]);
    let bytes = fabric.broadcast_bytes(format!("rank{}", fabric.global_rank()).as_bytes(), 1)?;
    fabric.barrier("collectives")?;
    let vs = nn::VarStore::new(fabric.device());
    let net = nn::linear(vs.root() / "fc", 3, 1, Default::default());
    let mut model = fabric.setup(&vs)?;
    let loss = net
        .forward(&Tensor::full([2, 3], 100.0, tch::kind::FLOAT_CPU))
        .sum(Kind::Float);
    fabric.backward(&mut model, &loss)?;
    fabric.clip_gradient_values(&model, 0.5)?;
    let largest = vs
        .trainable_variables()
        .iter()
        .map(|v| v.grad().abs().max().double_value(&[]))
        .fold(0.0, f64::max);
    Ok(format!(
        "mean={mean} sum={sum} gathered={:?} shape={:?} from_rank_1={from_1} bytes={} \
         largest_clipped={largest}",
        Vec::<f32>::try_from(gathered.flatten(0, -1))?,
        gathered.size(),
        String::from_utf8(bytes)?
    ))
}

/// The checkpoint calls' refusals on 2 ranks (the ddpspawn crate's, under Fabric's save and load):
/// rank 0 returns what went otherwise than expected, or "ok".
fn checkpoint_refusals(fabric: &Fabric) -> Result<String, Box<dyn Error>> {
    let context = fabric.rank_context().ok_or("no context in a rank")?;
    let dir = std::env::var("FABRIC_VERBS_DIR")?;
    let path = format!("{dir}/refusals.ckpt");
    let saved = Tensor::arange(6, tch::kind::FLOAT_CPU).view([2, 3]);
    let saved_ref = ddpspawn_tch::tensor_ref("saved", &saved)?;
    let mut wrong = Vec::new();
    let mut expect_error = |what: &str, result: Result<(), String>, wanted: &str| match result {
        Err(message) if message.contains(wanted) => {}
        other => wrong.push(format!(
            "{what}: {other:?}, wanted an error with '{wanted}'"
        )),
    };
    let save = |tensors: &[(&str, &ddpspawn::TensorRef)]| {
        context
            .save_checkpoint(&path, tensors, 5)
            .map_err(|e| e.to_string())
    };
    let rank_zero = fabric.is_global_zero();
    let twice = if rank_zero {
        "is given twice"
    } else {
        "rank 0 could not save the checkpoint"
    };
    expect_error(
        "a name twice",
        save(&[("w", &saved_ref), ("w", &saved_ref)]),
        twice,
    );
    let none = if rank_zero {
        "no tensor to save"
    } else {
        "rank 0 could not save the checkpoint"
    };
    expect_error("no tensor", save(&[]), none);
    save(&[("w", &saved_ref)])?;
    // Loads, on each rank: refused ones leave the target as it was.
    let load = |name: &str, target: &Tensor| -> Result<i64, String> {
        let target_ref = ddpspawn_tch::tensor_ref(name, target).map_err(|e| e.to_string())?;
        ddpspawn::load_checkpoint(&path, &[(name, &target_ref)]).map_err(|e| e.to_string())
    };
    let other_shape = Tensor::zeros([3, 2], tch::kind::FLOAT_CPU);
    expect_error(
        "another shape",
        load("w", &other_shape).map(|_| ()),
        "has shape [2, 3]",
    );
    let other_kind = Tensor::zeros([2, 3], tch::kind::DOUBLE_CPU);
    expect_error(
        "another kind",
        load("w", &other_kind).map(|_| ()),
        "is Float in the checkpoint",
    );
    let missing = Tensor::zeros([2, 3], tch::kind::FLOAT_CPU);
    expect_error(
        "a missing name",
        load("v", &missing).map(|_| ()),
        "has no tensor 'v'",
    );
    let untouched = other_shape.abs().sum(Kind::Float).double_value(&[])
        + other_kind.abs().sum(Kind::Double).double_value(&[])
        + missing.abs().sum(Kind::Float).double_value(&[]);
    if untouched != 0.0 {
        wrong.push("a refused load wrote into its tensor".to_string());
    }
    let target = Tensor::zeros([2, 3], tch::kind::FLOAT_CPU);
    let step = load("w", &target)?;
    if step != 5 || target.not_equal_tensor(&saved).any().int64_value(&[]) != 0 {
        wrong.push(format!("the good load: step {step}, values {target:?}"));
    }
    if !wrong.is_empty() {
        return Err(format!("rank {}: {}", fabric.global_rank(), wrong.join("; ")).into());
    }
    Ok("ok".to_string())
}

/// Each rank logs rank * 100 + step at steps 0..3 (rank 0's alone reach metrics.csv), then a
/// name with a comma, which is refused on every rank.
fn log(fabric: &Fabric) -> Result<String, Box<dyn Error>> {
    for step in 0..3 {
        let value = (fabric.global_rank() * 100) as f64 + step as f64;
        fabric.log("value", value, step, 0)?;
    }
    match fabric.log("a,b", 1.0, 3, 0) {
        Err(e)
            if e.to_string()
                .contains("cannot be a metrics.csv column value") => {}
        other => return Err(format!("a name with a comma: {other:?}").into()),
    }
    Ok("logged".to_string())
}

/// Rank 1's gradients are NaN at clip_gradients (rank 0's are finite).
fn nan_on_rank_1(fabric: &Fabric) -> Result<String, Box<dyn Error>> {
    let vs = nn::VarStore::new(fabric.device());
    let net = nn::linear(vs.root() / "fc", 3, 1, Default::default());
    let mut model = fabric.setup(&vs)?;
    let loss = net
        .forward(&Tensor::ones([2, 3], tch::kind::FLOAT_CPU))
        .sum(Kind::Float);
    fabric.backward(&mut model, &loss)?;
    if fabric.global_rank() == 1 {
        let _ = vs.trainable_variables()[0].grad().fill_(f64::NAN);
    }
    fabric.clip_gradients(&model, 1.0, 2.0)?;
    Ok("clipped".to_string())
}

fn panic_on_rank_1(fabric: &Fabric) -> Result<String, String> {
    if fabric.global_rank() == 1 {
        panic!("rank 1 gives up");
    }
    Ok(String::new())
}

fn expect(what: &str, ok: bool, detail: &str) -> Result<(), Box<dyn Error>> {
    if ok {
        println!("ok: {what}");
        Ok(())
    } else {
        Err(format!("{what}: {detail}").into())
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let job = match mode.as_str() {
        "collectives" => Some(Fabric::new(2).launch(collectives)),
        "nan" => Some(Fabric::new(2).launch(nan_on_rank_1)),
        "panic" => Some(Fabric::new(2).launch(panic_on_rank_1)),
        "checkpoint_refusals" => Some(Fabric::new(2).launch(checkpoint_refusals)),
        "log" => {
            let dir = std::env::var("FABRIC_VERBS_DIR").unwrap_or_default();
            Some(Fabric::new(2).log_dir(format!("{dir}/logs")).launch(log))
        }
        _ => None,
    };
    match job {
        Some(Ok(result)) => {
            println!("{result}");
            return Ok(());
        }
        Some(Err(error)) => {
            eprintln!("failed: {error}");
            std::process::exit(1);
        }
        None => {}
    }
    let outside = Fabric::new(2).barrier("outside").unwrap_err().to_string();
    expect(
        "a verb outside launch() is refused",
        outside.contains("Fabric::barrier is for a rank's function"),
        &outside,
    )?;
    let me = std::env::current_exe()?;
    let run = |mode: &str| std::process::Command::new(&me).arg(mode).output();
    let want = "mean=1.5 sum=3 gathered=[1.0, 2.0] shape=[2, 1, 1] from_rank_1=2 bytes=rank1 \
                largest_clipped=0.5";
    // Two processes of another launcher's job (its MASTER_ADDR, RANK and WORLD_SIZE): each joins
    // as its rank and runs the loop in place.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let ranks = (0..2)
        .map(|rank| {
            std::process::Command::new(&me)
                .arg("collectives")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "2")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    for rank in ranks {
        let out = rank.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        expect(
            "in another launcher's job, each process joins as its rank",
            out.status.success() && text.trim() == want,
            &format!("{text} {}", String::from_utf8_lossy(&out.stderr)),
        )?;
    }
    let out = run("collectives")?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    expect(
        "the collectives' values",
        text.trim() == want,
        &format!("{text} {out:?}"),
    )?;
    // Made here, exclusively (create_dir fails where it exists).
    let temp = std::env::var_os("TEST_TMPDIR").map_or_else(std::env::temp_dir, Into::into);
    let scratch = temp.join(format!("fabric_verbs.{}", std::process::id()));
    std::fs::create_dir(&scratch)?;
    let out = std::process::Command::new(&me)
        .arg("checkpoint_refusals")
        .env("FABRIC_VERBS_DIR", &scratch)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    expect(
        "save and load refuse a repeated name, no tensor, another shape or kind, a missing name",
        out.status.success() && text.trim() == "ok",
        &format!("{text} {}", String::from_utf8_lossy(&out.stderr)),
    )?;
    let out = std::process::Command::new(&me)
        .arg("log")
        .env("FABRIC_VERBS_DIR", &scratch)
        .output()?;
    let csv = std::fs::read_to_string(scratch.join("logs/metrics.csv")).unwrap_or_default();
    std::fs::remove_dir_all(&scratch)?;
    expect(
        "log writes rank 0's values to the Trainer's metrics.csv, and refuses a comma",
        out.status.success()
            && csv == "epoch,step,name,value\n0,0,value,0\n0,1,value,1\n0,2,value,2\n",
        &format!("{csv:?} {}", String::from_utf8_lossy(&out.stderr)),
    )?;
    let out = run("nan")?;
    let error = String::from_utf8_lossy(&out.stderr).to_string();
    expect(
        "a NaN gradient on rank 1 fails the job, naming the rank and the variable",
        !out.status.success()
            && error.contains("failed: rank 1 (pid")
            && error.contains("the gradient of fc.")
            && error.contains("is not finite"),
        &error,
    )?;
    let out = run("panic")?;
    let error = String::from_utf8_lossy(&out.stderr).to_string();
    expect(
        "a rank's panic fails the job with its message",
        !out.status.success()
            && error.contains("rank 1")
            && error.contains("panicked: rank 1 gives up"),
        &error,
    )?;
    Ok(())
}
