//! `muninn check-cache`: the cache model against recorded usage, beside the naive TTL rule, on
//! the tuning and set-aside parts of the data side by side (`muninn_core::split`), with goals
//! that fail the command when missed.

use crate::InputArgs;
use crate::output::outln;
use muninn_core::split::Part;
use muninn_core::validate::{
    Aggregate, CauseFigures, Disagreement, Figures, Side, ValidateOptions, ValidationReport,
    validate,
};

/// Arguments of `muninn check-cache`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    input: InputArgs,
    /// `table` (figures and disagreement classes) or `json` (the full report, one row per request).
    #[arg(long, default_value = "table")]
    format: String,
    /// Also list every request the cache model got wrong.
    #[arg(long)]
    disagreements: bool,
    /// Keep each session's tools head private (the default shares it across sessions, as the
    /// provider's organisation-wide cache does).
    #[arg(long)]
    no_shared_head: bool,
    /// A price table (TOML) to use instead of the embedded one: it says which provider's cache
    /// each model sits behind, and that cache's parameters (OpenAI's retention and step).
    #[arg(long)]
    prices: Option<std::path::PathBuf>,
    /// Goal: the cache model's agreement on main threads, as a fraction (0.98), on each part of
    /// the split. A part that misses it prints FAIL and the command exits non-zero.
    #[arg(long)]
    goal_agreement: Option<f64>,
    /// Goal: the cache model's read-token error on main threads, as a fraction (0.01), on each
    /// part of the split. A part above it prints FAIL and the command exits non-zero.
    #[arg(long)]
    goal_read_error: Option<f64>,
    /// Goal: the share of requests with a conclusive provider label (`cache_miss_reason`) whose
    /// cause agrees with it, as a fraction, over all threads of each part that has labels. No
    /// label at all is a FAIL: the goal cannot be checked on these traces.
    #[arg(long)]
    goal_cause_agreement: Option<f64>,
}

pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let import = args.input.import()?;
    let prices = crate::replay::load_prices(args.prices.as_deref())?;
    let options = ValidateOptions {
        share_tools_head: !args.no_shared_head,
        prices,
        ..ValidateOptions::default()
    };
    let report = validate(&import.traces, &options);
    match args.format.as_str() {
        "json" => outln!("{}", serde_json::to_string_pretty(&report)?)?,
        "table" => print_table(&report, args.disagreements)?,
        other => anyhow::bail!("unknown format {other:?}: expected table or json"),
    }
    let mut failed = check_goals(&report, args.goal_agreement, args.goal_read_error)?;
    if let Some(goal) = args.goal_cause_agreement {
        failed += check_cause_goal(&report, goal)?;
    }
    if failed > 0 {
        anyhow::bail!("FAIL: {failed} goal(s) missed");
    }
    Ok(())
}

/// PASS or FAIL per part with labels; FAIL when no request carries a conclusive label.
fn check_cause_goal(report: &ValidationReport, goal: f64) -> std::io::Result<usize> {
    let mut failed = 0;
    if report.causes.labelled == 0 {
        outln!("FAIL miss causes: no request carries a conclusive provider label")?;
        return Ok(1);
    }
    for (part, figures) in &report.parts {
        let Some(agreement) = figures.causes.agreement() else {
            continue;
        };
        let ok = agreement >= goal;
        failed += usize::from(!ok);
        outln!(
            "{} {} part: causes agree with the provider's labels on {} of {} ({:.2}%, goal ≥ {:.2}%)",
            if ok { "PASS" } else { "FAIL" },
            part.label(),
            figures.causes.agree,
            figures.causes.labelled,
            100.0 * agreement,
            100.0 * goal
        )?;
    }
    Ok(failed)
}

/// The figures of a part, or empty ones when the part has no request.
fn part<'a>(report: &'a ValidationReport, part: Part, empty: &'a Figures) -> &'a Figures {
    report.parts.get(&part).unwrap_or(empty)
}

/// The `table` format: agreement per part of the split, disagreement classes, miss causes, and
/// (asked for) every disagreement.
fn print_table(report: &ValidationReport, list_disagreements: bool) -> std::io::Result<()> {
    let empty = Figures::default();
    let tuning = part(report, Part::Tuning, &empty);
    let set_aside = part(report, Part::SetAside, &empty);
    print_agreement(report, tuning, set_aside)?;
    outln!()?;
    print_disagreement_classes(report)?;
    outln!()?;
    print_causes(report, tuning, set_aside)?;
    if list_disagreements {
        outln!()?;
        print_disagreements(report)?;
    }
    Ok(())
}

/// Each predictor's agreement and read error, main threads and all, per part of the split and
/// over all sessions.
fn print_agreement(
    report: &ValidationReport,
    tuning: &Figures,
    set_aside: &Figures,
) -> std::io::Result<()> {
    outln!(
        "{:<22} | {:<33} | {:<33} | {:<33}",
        "",
        "tuning part",
        "set-aside part",
        "all"
    )?;
    let columns = format!("{:>8} {:>11} {:>12}", "requests", "agreement", "read error");
    outln!(
        "{:<22} | {columns} | {columns} | {columns}",
        "predictor / threads"
    )?;
    let cell = |a: &Aggregate| {
        if a.requests == 0 {
            return format!("{:>8} {:>11} {:>12}", 0, "–", "–");
        }
        format!(
            "{:>8} {:>10.2}% {:>11.3}%",
            a.requests,
            100.0 * a.agreement,
            100.0 * a.read_error
        )
    };
    let line = |label: &str, pick: &dyn Fn(&Figures) -> (&Side, bool)| {
        let agg = |f: &Figures| {
            let (side, main) = pick(f);
            if main {
                side.main.clone()
            } else {
                side.all.clone()
            }
        };
        let all = Figures {
            model: report.model.clone(),
            naive: report.naive.clone(),
            causes: report.causes.clone(),
        };
        outln!(
            "{label:<22} | {} | {} | {}",
            cell(&agg(tuning)),
            cell(&agg(set_aside)),
            cell(&agg(&all))
        )
    };
    line("cache model / main", &|f| (&f.model, true))?;
    line("cache model / all", &|f| (&f.model, false))?;
    line("naive TTL rule / main", &|f| (&f.naive, true))?;
    line("naive TTL rule / all", &|f| (&f.naive, false))
}

/// How many requests each predictor got wrong, by disagreement class, over all threads.
fn print_disagreement_classes(report: &ValidationReport) -> std::io::Result<()> {
    outln!("disagreements by class (all threads): cache model | naive rule")?;
    let mut classes: Vec<_> = report
        .model
        .all
        .disagreements
        .keys()
        .chain(report.naive.all.disagreements.keys())
        .collect();
    classes.sort();
    classes.dedup();
    for class in classes {
        let count = |a: &Aggregate| a.disagreements.get(class).copied().unwrap_or(0);
        outln!(
            "  {:<24} {:>5} | {:>5}",
            class.as_str(),
            count(&report.model.all),
            count(&report.naive.all)
        )?;
    }
    Ok(())
}

/// Every request the cache model got wrong, one line each (`--disagreements`).
fn print_disagreements(report: &ValidationReport) -> std::io::Result<()> {
    for r in report.rows.iter().filter(|r| !r.cache_model.agree) {
        outln!(
            "{} #{} ({}) gap {} s: recorded read {} ({}), model {} ({}) — {}",
            r.trace,
            r.index,
            r.part.label(),
            r.gap_ms.map_or(0, |g| g / 1000),
            r.recorded_read,
            r.recorded_class,
            r.cache_model.read,
            r.cache_model.class,
            // Always named where the classes differ (`Prediction::disagreement`).
            r.cache_model.disagreement.map_or("–", Disagreement::as_str)
        )?;
    }
    Ok(())
}

/// The cache model's causes against the provider's labels, where the traces carry any.
fn print_causes(
    report: &ValidationReport,
    tuning: &Figures,
    set_aside: &Figures,
) -> std::io::Result<()> {
    let causes = &report.causes;
    if causes.labels.is_empty() {
        outln!(
            "miss causes: no request carries the provider's diagnosis (Claude Code's transcripts \
             carry it from 2.1.140 on; muninn's ledger has it when the backend asked)"
        )?;
        return Ok(());
    }
    let share = |c: &CauseFigures| {
        c.agreement().map_or("–".to_string(), |a| {
            format!("{} of {} ({:.2}%)", c.agree, c.labelled, 100.0 * a)
        })
    };
    outln!(
        "miss causes against the provider's labels: tuning {} | set aside {} | all {}",
        share(&tuning.causes),
        share(&set_aside.causes),
        share(causes)
    )?;
    // A prefix change of unknown level agrees with a change at any level, a change of tools or
    // system with either: say how many agreements named the provider's own level.
    let at_level = |c: &CauseFigures| {
        format!(
            "{} of {} ({} tools or system)",
            c.agree - c.unknown_level - c.two_levels,
            c.agree,
            c.two_levels
        )
    };
    outln!(
        "  agreeing at the provider's level (the rest tools or system, or a prefix change of \
         unknown level): tuning {} | set aside {} | all {}",
        at_level(&tuning.causes),
        at_level(&set_aside.causes),
        at_level(causes)
    )?;
    let labels: Vec<String> = causes
        .labels
        .iter()
        .map(|(label, n)| format!("{label} {n}"))
        .collect();
    outln!("  labels: {}", labels.join(", "))?;
    Ok(())
}

/// Checks the cache model's main-thread figures on each part against the goals: PASS or FAIL
/// per part and goal; returns how many were missed.
fn check_goals(
    report: &ValidationReport,
    agreement: Option<f64>,
    read_error: Option<f64>,
) -> std::io::Result<usize> {
    if agreement.is_none() && read_error.is_none() {
        return Ok(0);
    }
    let mut failed = 0;
    outln!()?;
    if report.parts.values().all(|f| f.model.main.requests == 0) {
        // Nothing to measure is no pass (as for the cause goal): a folder whose every request
        // was skipped, or of sub-agent threads only, exited 0 with no word on the goals.
        outln!("FAIL: no main-thread request in any part, the goals cannot be checked")?;
        return Ok(1);
    }
    for (part, figures) in &report.parts {
        let main = &figures.model.main;
        if main.requests == 0 {
            outln!("SKIP {}: no main-thread request", part.label())?;
            continue;
        }
        if let Some(goal) = agreement {
            let ok = main.agreement >= goal;
            failed += usize::from(!ok);
            outln!(
                "{} {} part: agreement on main threads {:.2}% (goal ≥ {:.2}%)",
                if ok { "PASS" } else { "FAIL" },
                part.label(),
                100.0 * main.agreement,
                100.0 * goal
            )?;
        }
        if let Some(goal) = read_error {
            let ok = main.read_error < goal;
            failed += usize::from(!ok);
            outln!(
                "{} {} part: read-token error on main threads {:.3}% (goal < {:.3}%)",
                if ok { "PASS" } else { "FAIL" },
                part.label(),
                100.0 * main.read_error,
                100.0 * goal
            )?;
        }
    }
    Ok(failed)
}
