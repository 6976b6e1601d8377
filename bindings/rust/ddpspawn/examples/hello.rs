//! The smallest complete ddpspawn program: it launches itself as 4 workers,
//! each worker adds its rank + 1 in an all-reduce, and rank 0 hands the sum
//! back to the launcher.
//!
//! `DDPSPAWN_LIB_DIR=/path/to/lib cargo run --example hello`

use ddpspawn::{Context, Launcher, ReduceOp};

fn main() -> ddpspawn::Result<()> {
    if ddpspawn::is_worker() {
        // Worker: join the group the launcher set up, and compute.
        let ctx = Context::from_env()?;
        let mut x = [ctx.rank() as f64 + 1.0];
        ctx.all_reduce(&mut x, ReduceOp::Sum)?;
        if ctx.rank() == 0 {
            ddpspawn::set_result(&x[0].to_le_bytes())?;
        }
        return Ok(());
    }

    // Launcher: re-run this executable as 4 workers and wait for them.
    let report = Launcher::new(4).spawn_current_exe(std::iter::empty::<&str>())?;
    let bytes = report.result().expect("rank 0 sets a result");
    let sum = f64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    println!("sum over 4 ranks of rank + 1 = {sum}");
    for rank in report.ranks() {
        println!("rank {} (pid {:?}): {:?}", rank.rank, rank.pid, rank.state);
    }
    Ok(())
}
