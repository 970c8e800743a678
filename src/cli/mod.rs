//! Command-line entry: parses arguments and hands each subcommand to the
//! module that owns it. Errors are printed as one line.

mod cluster;
mod data;
pub mod doctor;
mod matrix;
mod nightly;
mod parity;
mod rank;
mod recipe;
mod report;
mod run;
mod train;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "tricklab",
    version,
    about = "A terminal workbench for fast-training ablations: which trick buys how many seconds, at what accuracy?"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Open the terminal workbench (the default with no subcommand).
    Tui(crate::tui::TuiArgs),
    /// Run ablation matrices (use --headless for progress bars instead of the TUI).
    Run(run::RunArgs),
    /// Aggregate results folders into time-to-target tables and charts.
    Report(report::ReportArgs),
    /// Compare a candidate results folder against a base; non-zero exit on regression.
    Compare(report::CompareArgs),
    /// Run a matrix, compare it with a baseline, append the night to a history;
    /// exits like compare (for cron or a systemd timer).
    Nightly(nightly::NightlyArgs),
    /// List the sessions under a results root: date, matrix, runs, status.
    Results(report::ResultsArgs),
    /// Join shard folders (run --shard, Slurm tasks) into one results folder.
    Merge(cluster::MergeArgs),
    /// Hand a matrix to Slurm as a job array, follow it, re-submit what is left.
    Slurm(cluster::SlurmArgs),
    /// Inspect matrix files.
    Matrix(matrix::MatrixArgs),
    /// Train one run and print an epoch table and a summary.
    Train(train::TrainArgs),
    /// One rank of a run spread over several processes: started by `run`'s
    /// workers, srun or torchrun, which set RANK/WORLD_SIZE/MASTER_* (or SLURM_*).
    #[command(hide = true)]
    Rank(rank::RankArgs),
    /// The keeper of a script run's processes, started by the runner
    /// (src/script/keeper.rs): `keep -- PROGRAM ARGS`.
    #[command(hide = true)]
    Keep {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        argv: Vec<std::ffi::OsString>,
    },
    /// Train recipes beside the published scripts they reproduce, on the same
    /// images and steps, and write the side-by-side report (`make parity`).
    Parity(parity::ParityArgs),
    /// Print the trick catalog.
    Tricks(crate::tricks::TricksArgs),
    /// List the base recipes.
    Recipes(recipe::RecipesArgs),
    /// Show one recipe's resolved configuration.
    Recipe(recipe::RecipeShowArgs),
    /// Fetch, import, list and check data sets.
    Data(data::DataArgs),
    /// Check that libtorch, devices, data and the results folder are usable.
    Doctor(doctor::DoctorArgs),
    /// Write results folders out for TensorBoard, MLflow, W&B (offline) or CSV.
    Export(crate::export::ExportArgs),
    /// Print a shell completion script: `tricklab completions bash > ~/.local/share/bash-completion/completions/tricklab`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `--version`: the release, the commit it was built from and the libtorch it runs on.
fn version_line() -> String {
    format!(
        "tricklab {} (commit {}, libtorch {})",
        env!("CARGO_PKG_VERSION"),
        env!("TRICKLAB_BUILD_COMMIT"),
        crate::util::device::torch_info().version
    )
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    // Asked of the loaded libtorch, so only when asked for.
    if matches!(std::env::args().nth(1).as_deref(), Some("--version" | "-V")) {
        println!("{}", version_line());
        return 0;
    }
    // `tricklab --results DIR`, `tricklab --tiny`: the workbench's own
    // options without its name, as the bare `tricklab` opens it.
    // A script run started from here is kept by this binary (script/keeper.rs).
    if let Ok(exe) = std::env::current_exe() {
        crate::script::keeper::use_keeper(exe);
    }
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv
        .get(1)
        .and_then(|a| a.to_str())
        .is_some_and(|a| a.starts_with("--") && a != "--help")
    {
        argv.insert(1, "tui".into());
    }
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        // --help and --version: clap's own output, exit 0.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return 0;
        }
        Err(e) => {
            eprintln!("{}", clap_one_line(&e.render().to_string()));
            return 2;
        }
    };
    let result = match cli.command {
        None => crate::tui::cmd_tui(crate::tui::TuiArgs::default_args()),
        Some(Command::Tui(a)) => crate::tui::cmd_tui(a),
        Some(Command::Run(a)) => run::cmd_run(a),
        Some(Command::Report(a)) => report::cmd_report(a),
        Some(Command::Compare(a)) => report::cmd_compare(a),
        Some(Command::Nightly(a)) => nightly::cmd_nightly(a),
        Some(Command::Merge(a)) => cluster::cmd_merge(a),
        Some(Command::Results(a)) => report::cmd_results(a),
        Some(Command::Slurm(a)) => cluster::cmd_slurm(a),
        Some(Command::Matrix(matrix::MatrixArgs {
            command:
                matrix::MatrixCommand::Show {
                    files,
                    tiny,
                    power: Some(folder),
                    delta_time,
                    delta_acc,
                    format,
                    ..
                },
        })) => report::cmd_power(&files, tiny, &folder, delta_time, delta_acc, format),
        Some(Command::Matrix(a)) => matrix::cmd_matrix(a),
        Some(Command::Train(a)) => train::cmd_train(a),
        Some(Command::Rank(a)) => rank::cmd_rank(a),
        Some(Command::Keep { argv }) => Ok(crate::script::keeper::keep(&argv)),
        Some(Command::Parity(a)) => parity::cmd_parity(a),
        Some(Command::Tricks(a)) => crate::tricks::cmd_tricks(a),
        Some(Command::Recipes(a)) => recipe::cmd_recipes(a),
        Some(Command::Recipe(a)) => recipe::cmd_recipe_show(a),
        Some(Command::Data(a)) => data::cmd_data(a),
        Some(Command::Doctor(a)) => doctor::cmd_doctor(a),
        Some(Command::Export(a)) => crate::export::cmd_export(a),
        Some(Command::Completions { shell }) => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "tricklab",
                &mut std::io::stdout(),
            );
            Ok(0)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            crate::util::exit_code_of(&e)
        }
    }
}

/// A clap error without its usage block, on one line like every other error.
fn clap_one_line(text: &str) -> String {
    let head: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    format!("{} (`--help` lists the options)", head.join(" "))
}

use crate::util::one_line;
