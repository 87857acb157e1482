//! The JSON document (every figure of every round, and medians) and its Markdown table.

use serde_json::{Map, Value, json};

use crate::Results;

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

pub fn document(
    run: Value,
    machine: Value,
    versions: Value,
    limits: Vec<Value>,
    results: &Results,
) -> Value {
    let mut limit_median = Map::new();
    if let Some(first) = limits.first().and_then(|l| l.as_object()) {
        for key in first.keys() {
            let m = median(limits.iter().filter_map(|l| l[key].as_f64()).collect());
            limit_median.insert(key.clone(), json!(m));
        }
    }
    let cells: Vec<Value> = results
        .cells
        .iter()
        .map(|c| {
            let mut systems = Map::new();
            for (name, rounds) in &c.figures {
                let values: Vec<f64> = rounds
                    .iter()
                    .filter_map(|r| r.as_ref().ok()?["value"].as_f64())
                    .collect();
                let errors: Vec<&String> = rounds.iter().filter_map(|r| r.as_ref().err()).collect();
                let rounds: Vec<Value> = rounds
                    .iter()
                    .map(|r| r.clone().unwrap_or_else(|e| json!({"error": e})))
                    .collect();
                systems.insert(
                    name.to_string(),
                    json!({
                        "median": median(values.clone()),
                        "min": values.iter().cloned().reduce(f64::min),
                        "max": values.iter().cloned().reduce(f64::max),
                        "rounds_measured": values.len(),
                        "error": errors.first(),
                        "rounds": rounds,
                    }),
                );
            }
            json!({
                "id": c.id, "group": c.group, "description": c.desc, "unit": c.unit,
                "higher_is_better": c.higher_is_better, "systems": systems,
            })
        })
        .collect();
    json!({
        "run": run,
        "machine": machine,
        "versions": versions,
        "limits": {"median": limit_median, "rounds": limits},
        "cells": cells,
    })
}

fn fmt(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

const PEERS: [(&str, &str); 2] = [("tephra", "Tephra"), ("umadb", "UmaDB")];

/// A target of issue 14 for one row.
#[derive(Clone, Copy)]
enum Target {
    /// Lapilli at least this many times better than the peer: its figure >= f x the peer's
    /// where higher is better, the peer's >= f x Lapilli's where lower is better (so f = 10
    /// on open time is "10 times faster", f = 0.1 "within 10 times", f = 4 on RSS "1/4").
    Peer(&'static str, f64),
    /// Lapilli's own figure at most this (a ratio, or MiB).
    AtMost(f64),
}

/// The targets of a row, by its id (issue 14, "Targets").
fn targets(id: &str) -> Vec<Target> {
    use Target::*;
    const COLD: [Target; 2] = [Peer("umadb", 1.0), Peer("tephra", 1.25)];
    let starts = |p: &str| id.starts_with(p);
    if id.contains("stale cursor cost") {
        vec![AtMost(1.5)]
    } else if starts("Writer memory steady") {
        vec![AtMost(128.0)]
    } else if starts("Writer memory") {
        vec![]
    } else if id.contains("open time") {
        vec![Peer("tephra", 10.0), Peer("umadb", 0.1)]
    } else if id.contains("RSS growth") {
        vec![Peer("tephra", 4.0)]
    } else if starts("R3") || starts("Scale cold read") || starts("Scale newest event") {
        COLD.to_vec()
    } else if starts("Scale catch-up") {
        vec![Peer("tephra", 1.25)]
    } else if id.contains("latency") && (starts("R5") || starts("W2")) {
        vec![Peer("tephra", 1.0)]
    } else if starts("R4") {
        vec![Peer("tephra", 1.25), Peer("umadb", 1.5)]
    } else if starts("R1") || starts("R2") || starts("R5") || starts("W") {
        vec![Peer("tephra", 1.25)]
    } else {
        vec![]
    }
}

fn peer_name(sys: &str) -> &'static str {
    PEERS
        .iter()
        .find(|(s, _)| *s == sys)
        .map(|(_, n)| *n)
        .unwrap_or("?")
}

fn target_text(t: Target, hib: bool, unit: &str) -> String {
    match t {
        Target::Peer(sys, f) => {
            let name = peer_name(sys);
            match (hib, f) {
                (true, f) => format!("≥{f}x {name}"),
                (false, f) if f == 1.0 => format!("≤ {name}'s"),
                (false, f) if f > 1.0 && unit == "ms" => format!("≥{f}x faster than {name}"),
                (false, f) if f > 1.0 => format!("≤1/{f} of {name}'s"),
                (false, f) => format!("within {}x of {name}", 1.0 / f),
            }
        }
        Target::AtMost(v) => format!("≤ {v}{}", if unit == "x" { "x".into() } else { format!(" {unit}") }),
    }
}

/// Whether Lapilli's median meets target `t`, and how far it got (better-ness against the
/// peer, or its own figure), or `None` without the figures to say.
fn meets(t: Target, hib: bool, fig: &dyn Fn(&str) -> Option<f64>) -> Option<(bool, f64)> {
    let l = fig("lapilli")?;
    match t {
        Target::Peer(sys, f) => {
            let p = fig(sys)?;
            let ok = if hib { l >= f * p } else { l * f <= p };
            let better = if hib { l / p } else { p / l };
            Some((ok, better))
        }
        Target::AtMost(v) => Some((l <= v, l)),
    }
}

/// The verdict column: every target of the row met, or which not and by how much.
fn target_verdict(c: &Value) -> (String, String, Option<String>) {
    let id = c["id"].as_str().unwrap_or("");
    let hib = c["higher_is_better"].as_bool().unwrap_or(true);
    let unit = c["unit"].as_str().unwrap_or("");
    let fig = |sys: &str| c["systems"][sys]["median"].as_f64();
    let ts = targets(id);
    if ts.is_empty() {
        return ("—".into(), "no target".into(), None);
    }
    let text = ts
        .iter()
        .map(|&t| target_text(t, hib, unit))
        .collect::<Vec<_>>()
        .join("; ");
    let mut misses = Vec::new();
    let mut unknown = Vec::new();
    for &t in &ts {
        match meets(t, hib, &fig) {
            Some((true, _)) => {}
            Some((false, got)) => misses.push(match t {
                Target::Peer(sys, _) if hib => format!("{got:.2}x {}", peer_name(sys)),
                Target::Peer(sys, _) if got >= 1.0 => {
                    format!("{got:.2}x better than {}", peer_name(sys))
                }
                Target::Peer(sys, _) if got == 0.0 => format!("{}'s is 0", peer_name(sys)),
                Target::Peer(sys, _) => format!("{:.2}x worse than {}", 1.0 / got, peer_name(sys)),
                Target::AtMost(_) if unit == "x" => format!("{}x", fmt(got)),
                Target::AtMost(_) => format!("{} {unit}", fmt(got)),
            }),
            None => unknown.push(target_text(t, hib, unit)),
        }
    }
    let verdict = if !misses.is_empty() {
        format!("**misses**: {}", misses.join("; "))
    } else if !unknown.is_empty() {
        format!("no figure for {}", unknown.join("; "))
    } else {
        "meets".into()
    };
    let miss = (!misses.is_empty()).then(|| format!("{id}: {} (target {text})", misses.join("; ")));
    (text, verdict, miss)
}

pub fn markdown(doc: &Value) -> String {
    let mut s = String::new();
    let run = &doc["run"];
    let m = &doc["machine"];
    let v = &doc["versions"];
    s += &format!(
        "# Lapilli benchmark, {} scale, {}\n\n",
        run["scale"].as_str().unwrap_or(""),
        run["date_utc"].as_str().unwrap_or("")
    );
    s += &format!(
        "Machine: {} cores ({}), {} GiB, {}, {}; data on {} ({}). Load average at start {}, at end {}.\n\n",
        m["nproc"],
        m["cpu"].as_str().unwrap_or(""),
        m["memory_gib"],
        m["kernel"].as_str().unwrap_or(""),
        m["os"].as_str().unwrap_or(""),
        m["filesystem"].as_str().unwrap_or(""),
        m["device"].as_str().unwrap_or(""),
        run["loadavg_start"].as_str().unwrap_or(""),
        run["loadavg_end"].as_str().unwrap_or(""),
    );
    s += &format!(
        "Versions: {}, tephra {}, umadb-core {}. Command: `{}`.\n\n",
        v["lapilli"].as_str().unwrap_or(""),
        v["tephra"].as_str().unwrap_or(""),
        v["umadb-core"].as_str().unwrap_or(""),
        run["command"].as_str().unwrap_or(""),
    );
    s += &format!(
        "Medians of {} rounds, systems interleaved per cell (order rotated each round), {} s windows; corpus of {} events \
         of {} bytes, {} entities; Lapilli and Tephra segments of {} MiB; UmaDB writes through `writer_thread_blocking`. \
         Run took {:.0} s. Every figure of every round is in the JSON file beside this one.\n\n",
        run["rounds"],
        run["window_seconds"],
        run["corpus_events"],
        run["event_bytes"],
        run["entities"],
        run["segment_size_bytes"].as_u64().unwrap_or(0) >> 20,
        run["duration_seconds"].as_f64().unwrap_or(0.0),
    );

    s += "## Lapilli against its peers\n\n";
    s += "Ratio = Lapilli / peer of the figure in that row (for latency, time, memory and cost rows lower is better, so a ratio above 1 is a loss). \
          Target = issue 14's target for the row (\"≥1.25x Tephra\": Lapilli's figure at least 1.25 times Tephra's; for lower-is-better rows \
          \"≥10x faster\", \"≤1/4 of\", \"within 10x of\" compare the same way; \"≤ 1.5x\" and \"≤ 128 MiB\" are Lapilli's own figure); \
          the verdict says whether the medians meet it, and where not, how far Lapilli got.\n\n";
    s += "| workload | unit | Lapilli | Tephra | UmaDB | Lapilli on Postgres | Lapilli / Tephra | Lapilli / UmaDB | target | verdict | against the peers |\n";
    s += "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|\n";
    let mut notes: Vec<String> = Vec::new();
    let mut note = |text: &str| -> usize {
        match notes.iter().position(|n| n == text) {
            Some(i) => i + 1,
            None => {
                notes.push(text.to_string());
                notes.len()
            }
        }
    };
    let cells = doc["cells"].as_array().cloned().unwrap_or_default();
    let mut losses: Vec<String> = Vec::new();
    let mut target_misses: Vec<String> = Vec::new();
    for c in &cells {
        let hib = c["higher_is_better"].as_bool().unwrap_or(true);
        let fig = |sys: &str| c["systems"][sys]["median"].as_f64();
        let mut cols = Vec::new();
        for sys in ["lapilli", "tephra", "umadb", "postgres"] {
            let cell = &c["systems"][sys];
            cols.push(match fig(sys) {
                Some(x) => {
                    let rm = cell["rounds_measured"].as_u64().unwrap_or(0);
                    let total = cell["rounds"].as_array().map(|r| r.len()).unwrap_or(0) as u64;
                    if rm < total {
                        format!("{} ({rm}/{total} rounds)", fmt(x))
                    } else {
                        fmt(x)
                    }
                }
                None if cell.is_null() => "not run".into(),
                None => format!(
                    "— [{}]",
                    note(cell["error"].as_str().unwrap_or("no figure"))
                ),
            });
        }
        let mut ratios = Vec::new();
        let mut verdict = Vec::new();
        for (sys, name) in PEERS {
            match (fig("lapilli"), fig(sys)) {
                (Some(l), Some(p)) if p > 0.0 => {
                    let r = l / p;
                    ratios.push(format!("{r:.2}"));
                    let better = if hib { r } else { 1.0 / r };
                    if better < 0.95 {
                        losses.push(format!(
                            "{}: {:.2}x {} than {name}",
                            c["id"].as_str().unwrap_or(""),
                            1.0 / better,
                            if hib { "slower" } else { "worse" }
                        ));
                        verdict.push(format!(
                            "**loses to {name} ({:.2}x {})**",
                            1.0 / better,
                            if hib { "slower" } else { "worse" }
                        ));
                    } else if better > 1.05 {
                        verdict.push(format!("beats {name}"));
                    } else {
                        verdict.push(format!("ties {name}"));
                    }
                }
                _ => ratios.push("—".into()),
            }
        }
        let (target, target_verdict, miss) = target_verdict(c);
        target_misses.extend(miss);
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            c["id"].as_str().unwrap_or(""),
            c["unit"].as_str().unwrap_or(""),
            cols[0],
            cols[1],
            cols[2],
            cols[3],
            ratios[0],
            ratios[1],
            target,
            target_verdict,
            verdict.join("; ")
        );
    }

    s += "\n### Rows that miss their target (issue 14)\n\n";
    if target_misses.is_empty() {
        s += "None in this run.\n";
    }
    for m in &target_misses {
        s += &format!("- {m}\n");
    }

    s += "\n### Where Lapilli loses (median below 0.95 of a peer's)\n\n";
    if losses.is_empty() {
        s += "Nowhere in this run.\n";
    }
    for l in &losses {
        s += &format!("- {l}\n");
    }

    // Rounds where Lapilli lost to a peer although its median did not: the median can hide a
    // state that only one round saw.
    let mut round_losses = Vec::new();
    for c in &cells {
        let hib = c["higher_is_better"].as_bool().unwrap_or(true);
        let rounds = |sys: &str| -> Vec<Option<f64>> {
            c["systems"][sys]["rounds"]
                .as_array()
                .map(|r| r.iter().map(|f| f["value"].as_f64()).collect())
                .unwrap_or_default()
        };
        let lap = rounds("lapilli");
        for (sys, name) in PEERS {
            let (Some(l), Some(p)) = (
                c["systems"]["lapilli"]["median"].as_f64(),
                c["systems"][sys]["median"].as_f64(),
            ) else {
                continue;
            };
            let better = if hib { l / p } else { p / l };
            if better < 0.95 {
                continue; // already listed above
            }
            for (i, (l, p)) in lap.iter().zip(rounds(sys)).enumerate() {
                if let (Some(l), Some(p)) = (l, p) {
                    let b = if hib { l / p } else { p / l };
                    if b < 0.95 {
                        round_losses.push(format!(
                            "{} in round {}: {} against {name}'s {} ({:.2}x {})",
                            c["id"].as_str().unwrap_or(""),
                            i + 1,
                            fmt(*l),
                            fmt(p),
                            1.0 / b,
                            if hib { "slower" } else { "worse" }
                        ));
                    }
                }
            }
        }
    }
    if !round_losses.is_empty() {
        s += "\n### Rounds where Lapilli lost although its median did not\n\n";
        for l in &round_losses {
            s += &format!("- {l}\n");
        }
    }

    // How cold the cold reads were: what each open left in the page cache.
    if let Some(c) = cells
        .iter()
        .find(|c| c["id"] == "Startup open time (cold cache)")
    {
        let mut parts = Vec::new();
        for (sys, name) in [
            ("lapilli", "Lapilli"),
            ("tephra", "Tephra"),
            ("umadb", "UmaDB"),
        ] {
            let fig = &c["systems"][sys];
            if let (Some(after), Some(total), Some(before)) = (
                median_key(fig, "resident_bytes_after_open"),
                median_key(fig, "store_bytes"),
                median_key(fig, "resident_bytes_before_open"),
            ) {
                parts.push(format!(
                    "{name} {:.1} MiB of {:.1} MiB (before the open: {:.1} MiB)",
                    after / 1048576.0,
                    total / 1048576.0,
                    before / 1048576.0
                ));
            }
        }
        if !parts.is_empty() {
            s += &format!(
                "\nHow cold the startup was: store bytes in the page cache right after the cold open \
                 (medians): {}.\n",
                parts.join("; ")
            );
        }
    }
    // How cold the cold reads were: what the eviction after the open left.
    let mut cold_parts = Vec::new();
    for id in [
        "R3 cold selective, 16 readers",
        "Scale cold read, hot entity",
        "Scale cold read, rare entity",
    ] {
        let Some(c) = cells.iter().find(|c| c["id"] == id) else {
            continue;
        };
        let mut parts = Vec::new();
        for (sys, name) in [
            ("lapilli", "Lapilli"),
            ("tephra", "Tephra"),
            ("umadb", "UmaDB"),
        ] {
            if let Some(r) = median_key(&c["systems"][sys], "resident_bytes_after_evict") {
                parts.push(format!("{name} {:.1} MiB", r / 1048576.0));
            }
        }
        if !parts.is_empty() {
            cold_parts.push(format!("{id}: {}", parts.join(", ")));
        }
    }
    if !cold_parts.is_empty() {
        s += &format!(
            "\nHow cold the cold reads were: each starts after the store's pages were evicted again with the \
             store open (its mappings of the files dropped first, see bench/README.md), so nothing the open read \
             serves them. Store bytes still in the page cache when the reads began (medians): {}.\n",
            cold_parts.join("; ")
        );
    }

    // Lapilli against the machine.
    let lim = &doc["limits"]["median"];
    let get = |id: &str, key: &str| -> Option<f64> {
        cells.iter().find(|c| c["id"] == id).and_then(|c| {
            let sys = &c["systems"]["lapilli"];
            if key == "value" {
                sys["median"].as_f64()
            } else {
                crate::report::median_key(sys, key)
            }
        })
    };
    s += "\n## Lapilli against the machine's limits (measured in the same run)\n\n";
    s += "| what | Lapilli | machine limit | Lapilli / limit | target | verdict |\n|---|---:|---:|---:|---|---|\n";
    let fsync_p50 = lim["fdatasync_4k_overwrite_p50_us"].as_f64();
    // The last field: issue 14's target for Lapilli / limit, where it sets one.
    let rows: Vec<(&str, Option<f64>, Option<f64>, Option<f64>)> = vec![
        (
            "1 writer, unbatched: appends/s vs fdatasyncs/s of a 4 KiB overwrite",
            get("W2 unbatched, 1 writers", "value"),
            fsync_p50.map(|u| 1e6 / u),
            Some(0.8),
        ),
        (
            "1 writer: append p50 latency vs fdatasync p50 of a 4 KiB overwrite (us; lower is better)",
            get("W2 p50 latency, 1 writers", "value"),
            fsync_p50,
            None,
        ),
        (
            "batch 512, 64 writers: payload bytes/s vs sequential write bandwidth",
            get("W1 batch 512, 64 writers", "value").map(|e| e * crate::EVENT_BYTES as f64),
            lim["seq_write_bytes_per_s"].as_f64(),
            Some(0.5),
        ),
        (
            "R3 cold selective: events/s vs cold random 4 KiB reads/s (16 threads)",
            get("R3 cold selective, 16 readers", "value"),
            lim["cold_random_4k_reads_per_s_16_threads"].as_f64(),
            None,
        ),
    ];
    for (what, l, limit, target) in rows {
        let ratio = match (l, limit) {
            (Some(l), Some(m)) if m > 0.0 => Some(l / m),
            _ => None,
        };
        let (t, verdict) = match (target, ratio) {
            (None, _) => ("—".to_string(), "no target".to_string()),
            (Some(t), Some(r)) if r >= t => (format!("≥ {t}"), "meets".into()),
            (Some(t), Some(r)) => (format!("≥ {t}"), format!("**misses**: {r:.2}")),
            (Some(t), None) => (format!("≥ {t}"), "no figure".into()),
        };
        s += &format!(
            "| {what} | {} | {} | {} | {t} | {verdict} |\n",
            l.map(fmt).unwrap_or("—".into()),
            limit.map(fmt).unwrap_or("—".into()),
            ratio.map(|r| format!("{r:.2}")).unwrap_or("—".into()),
        );
    }
    s += &format!(
        "\nMachine limits (medians): fdatasync of a 4 KiB overwrite in a written file p50 {} us, p99 {} us; \
         of a 4 KiB append growing the file p50 {} us, p99 {} us; sequential write {} MB/s (one fsync at the end); \
         cold sequential read {} MB/s; cold random 4 KiB reads {} /s on 1 thread, {} /s on 16 threads. Eviction check: {} of the test file \
         resident after POSIX_FADV_DONTNEED.\n",
        lim["fdatasync_4k_overwrite_p50_us"]
            .as_f64()
            .map(fmt)
            .unwrap_or_default(),
        lim["fdatasync_4k_overwrite_p99_us"]
            .as_f64()
            .map(fmt)
            .unwrap_or_default(),
        lim["fdatasync_4k_append_p50_us"]
            .as_f64()
            .map(fmt)
            .unwrap_or_default(),
        lim["fdatasync_4k_append_p99_us"]
            .as_f64()
            .map(fmt)
            .unwrap_or_default(),
        lim["seq_write_bytes_per_s"]
            .as_f64()
            .map(|b| fmt(b / 1e6))
            .unwrap_or_default(),
        lim["cold_seq_read_bytes_per_s"]
            .as_f64()
            .map(|b| fmt(b / 1e6))
            .unwrap_or_default(),
        lim["cold_random_4k_reads_per_s_1_thread"]
            .as_f64()
            .map(fmt)
            .unwrap_or_default(),
        lim["cold_random_4k_reads_per_s_16_threads"]
            .as_f64()
            .map(fmt)
            .unwrap_or_default(),
        lim["resident_fraction_after_evict"]
            .as_f64()
            .map(|f| format!("{:.1}%", f * 100.0))
            .unwrap_or_default(),
    );
    if !notes.is_empty() {
        s += "\n## Cells without a figure\n\n";
        for (i, n) in notes.iter().enumerate() {
            s += &format!("{}. {n}\n", i + 1);
        }
    }
    s += "\n## What each row measures\n\n";
    let mut seen = std::collections::BTreeSet::new();
    for c in &cells {
        let key = (
            c["group"].as_str().unwrap_or("").to_string(),
            c["description"].as_str().unwrap_or("").to_string(),
        );
        if seen.insert(key.clone()) {
            s += &format!("- {}: {}\n", key.0, key.1);
        }
    }
    s
}

/// Median over rounds of `key` in a system's figures.
pub fn median_key(sys: &Value, key: &str) -> Option<f64> {
    median(
        sys["rounds"]
            .as_array()?
            .iter()
            .filter_map(|r| r[key].as_f64())
            .collect(),
    )
}
