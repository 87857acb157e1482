//! The scale cells and the writer-memory cell: each system in a fresh process of its own (this
//! binary run again as `lapilli-bench scale-child <system> <dir> <step> ...`), so the resident
//! memory, the heap and the page cache a figure sees are that system's alone.
//!
//! Steps of a child:
//! - `build`: a store of `--events` skewed corpus events (`skewed_event`, 100 events an entity
//!   on average, the hottest entity holding 15%), appended in batches of 1000, then closed.
//!   Once per system per run.
//! - `measure`: the store's files evicted (`POSIX_FADV_DONTNEED`; nothing has it open), then
//!   the open timed until the first `head()`, the process's `VmRSS` and `RssAnon` growth
//!   across it; then, each after evicting the store's pages again while it is open
//!   (`machine::evict_open_dir`), the first read of the hot entity, of a rare one, the newest
//!   event of the second-hottest entity and a catch-up from 0; last, warm, the stale-cursor
//!   ratio. Once per system per round.
//! - `writer-memory`: a fresh store, `--events` events of three tags each (one unique per
//!   event) appended in batches of 1000 while a thread samples `RssAnon` every 100 ms.
//!
//! A child writes its figures (or `{"error": ...}`) as JSON to `--out`; its stdout is
//! discarded (UmaDB's open prints its settings there) and its stderr is the run's.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::systems::{self, Cond, Config, Ev, Kind, Q, ReadOut, Res, System};
use crate::{HOT_SHARE, Results, Zipf, machine};

/// Average events per entity in the scale and writer-memory stores (the even corpus's).
const EVENTS_PER_ENTITY: u64 = 100;
/// Events per append while building (and in the writer-memory cell).
const BUILD_BATCH: u64 = 1000;

fn zipf_for(events: u64) -> Zipf {
    Zipf::new((events / EVENTS_PER_ENTITY).max(1), HOT_SHARE)
}

/// What the parent tells a child.
pub struct Params {
    pub events: u64,
    pub segment_size: u64,
    /// Window of each half of the stale-cursor cell.
    pub secs: f64,
}

/// The parent side: runs the children and records their figures.
pub struct Scale {
    pub dir: PathBuf,
    pub events: u64,
    pub writer_events: u64,
    pub segment_size: u64,
    pub secs: f64,
}

impl Scale {
    pub fn store_dir(&self, kind: Kind) -> PathBuf {
        self.dir.join("store").join(kind.name())
    }

    fn child(&self, kind: Kind, dir: &Path, step: &str, events: u64) -> Res<Value> {
        fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let out = self.dir.join(format!("{}-{step}.json", kind.name()));
        let _ = fs::remove_file(&out);
        // This very binary (its inode, even if a rebuild replaced the file since it started),
        // so parent and children are always the same code.
        let status = Command::new("/proc/self/exe")
            .arg("scale-child")
            .arg(kind.name())
            .arg(dir)
            .arg(step)
            .args(["--events", &events.to_string()])
            .args(["--segment-size", &self.segment_size.to_string()])
            .args(["--secs", &self.secs.to_string()])
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::null())
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("scale-child {step}: {e}"))?;
        let text = fs::read_to_string(&out)
            .map_err(|e| format!("scale-child {step} exited with {status}, no result: {e}"))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        if let Some(e) = v["error"].as_str() {
            return Err(format!("scale-child {step}: {e}"));
        }
        if !status.success() {
            return Err(format!("scale-child {step} exited with {status}"));
        }
        Ok(v)
    }

    /// Builds the system's store of `events` events in a child, once per run.
    pub fn build(&self, kind: Kind) -> Res<Value> {
        let dir = self.store_dir(kind);
        let _ = fs::remove_dir_all(&dir);
        self.child(kind, &dir, "build", self.events)
    }

    /// One round of the scale cells for one system, in a fresh child.
    pub fn measure(&self, kind: Kind, built: &Res<Value>, results: &mut Results) {
        // Read through by the parent (`machine::read_through`), so that the host's cache of the
        // disk holds every system's store alike; not in the child, whose memory is measured.
        let dir = self.store_dir(kind);
        let fig = match built {
            Ok(_) => machine::read_through(&dir)
                .map_err(|e| format!("read {}: {e}", dir.display()))
                .and_then(|(bytes, seconds)| {
                    let mut v = self.child(kind, &dir, "measure", self.events)?;
                    v["open"] = crate::with_read_through(v["open"].take(), bytes, seconds);
                    Ok(v)
                }),
            Err(e) => Err(format!("no store: {e}")),
        };
        let part = |key: &str, value: &dyn Fn(&Value) -> Option<f64>| -> Res<Value> {
            let v = fig.as_ref().map_err(|e| e.clone())?;
            let p = &v[key];
            if let Some(e) = p["error"].as_str() {
                return Err(e.to_string());
            }
            let x = value(p).ok_or(format!("no {key} figure"))?;
            let mut o = p.clone();
            o["value"] = json!(x);
            Ok(o)
        };
        let n = self.events;
        let mib = |b: Option<f64>| b.map(|b| b / 1048576.0);
        let cells: Vec<(String, &str, &str, bool, Res<Value>)> = vec![
            (
                "Scale open time (cold, fresh process)".into(),
                "open after a clean close, store files evicted, until the first head(), in a fresh process, ms",
                "ms",
                false,
                part("open", &|p| p["open_ms"].as_f64()),
            ),
            (
                "Scale RSS growth after open".into(),
                "growth of the fresh process's VmRSS across the open and first head(), MiB",
                "MiB",
                false,
                part("open", &|p| mib(p["rss_growth_bytes"].as_f64())),
            ),
            (
                "Scale anonymous RSS growth after open".into(),
                "growth of the fresh process's RssAnon (heap, not mapped file pages) across the open, MiB",
                "MiB",
                false,
                part("open", &|p| mib(p["anon_growth_bytes"].as_f64())),
            ),
            (
                "Scale cold read, hot entity".into(),
                "the first read of the hottest entity (15% of the store), forwards, whole, after evicting the open store's pages, events/s",
                "events/s",
                true,
                part("hot", &|p| p["events_per_s"].as_f64()),
            ),
            (
                "Scale cold read, rare entity".into(),
                "the first read of an entity of ~100 events, after evicting the open store's pages, events/s",
                "events/s",
                true,
                part("rare", &|p| p["events_per_s"].as_f64()),
            ),
            (
                "Scale newest event of an entity (cold)".into(),
                "newest event of the second-hottest entity (~7% of the store), backwards limit 1, after evicting the open store's pages, ms",
                "ms",
                false,
                part("newest", &|p| p["seconds"].as_f64().map(|s| s * 1e3)),
            ),
            (
                "Scale catch-up from 0".into(),
                "subscription to everything from position 0 until caught up, after evicting the open store's pages, events/s (UmaDB: a forward read of everything in pages, it has no embedded subscription)",
                "events/s",
                true,
                part("catch_up", &|p| p["events_per_s"].as_f64()),
            ),
            (
                "Scale stale cursor cost (after = 1 / after = head)".into(),
                "time per guarded append with `after` = 1 over one with `after` = the head, guard on the hottest entity's tag (matching nothing), one writer, warm, x",
                "x",
                false,
                part("stale", &|p| p["ratio"].as_f64()),
            ),
        ];
        for (id, desc, unit, hib, fig) in cells {
            let desc = format!("{desc} ({n} events)");
            results.record(&id, "Scale", &desc, unit, hib, kind, fig);
        }
    }

    /// The writer-memory cell for one system, in a fresh child, on a store it creates.
    pub fn writer_memory(&self, kind: Kind, results: &mut Results) {
        let dir = self.dir.join("writer-memory").join(kind.name());
        let _ = fs::remove_dir_all(&dir);
        let fig = self.child(kind, &dir, "writer-memory", self.writer_events);
        let _ = fs::remove_dir_all(&dir);
        let n = self.writer_events;
        for (id, key, desc) in [
            (
                "Writer memory steady RssAnon",
                "steady_anon_bytes",
                "median of the writer process's RssAnon over the second half of appending",
            ),
            (
                "Writer memory peak RssAnon",
                "peak_anon_bytes",
                "highest RssAnon sampled while appending",
            ),
        ] {
            let f = fig.as_ref().map_err(|e| e.clone()).and_then(|v| {
                let x = v[key].as_f64().ok_or(format!("no {key}"))?;
                let mut o = v.clone();
                o["value"] = json!(x / 1048576.0);
                // The samples are long; the JSON keeps them once, in the steady row.
                if key != "steady_anon_bytes" {
                    o.as_object_mut().map(|m| m.remove("samples"));
                }
                Ok(o)
            });
            let desc = format!(
                "{desc}: {n} events of 3 tags (one unique per event) appended in batches of {BUILD_BATCH} to a fresh store by a fresh process, RssAnon sampled every 100 ms, MiB"
            );
            results.record(id, "Writer memory", &desc, "MiB", false, kind, f);
        }
    }
}

// ------------------------------------------------------------------ the child

/// `lapilli-bench scale-child <system> <dir> <step> --events N --segment-size B --secs S --out FILE`
pub fn child_main(args: &[String]) -> Result<(), String> {
    let usage = "scale-child <system> <dir> <build|measure|writer-memory> --events N --segment-size B --secs S --out FILE";
    let [system, dir, step, rest @ ..] = args else {
        return Err(usage.into());
    };
    let kind = Kind::ALL
        .into_iter()
        .find(|k| k.name() == system)
        .ok_or(format!("unknown system {system}"))?;
    let (mut events, mut segment_size, mut secs, mut out) = (None, None, None, None);
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or(format!("{a} needs a value"))?;
        let bad = |_| format!("bad value {v} for {a}");
        match a.as_str() {
            "--events" => events = Some(v.parse::<u64>().map_err(bad)?),
            "--segment-size" => segment_size = Some(v.parse::<u64>().map_err(bad)?),
            "--secs" => secs = Some(v.parse::<f64>().map_err(|_| format!("bad value {v} for {a}"))?),
            "--out" => out = Some(PathBuf::from(v)),
            _ => return Err(format!("unknown argument {a}; {usage}")),
        }
    }
    let out = out.ok_or(usage)?;
    let p = Params {
        events: events.ok_or(usage)?,
        segment_size: segment_size.ok_or(usage)?,
        secs: secs.ok_or(usage)?,
    };
    let dir = Path::new(dir);
    let result = match step.as_str() {
        "build" => build(kind, dir, &p),
        "measure" => measure(kind, dir, &p),
        "writer-memory" => writer_memory(kind, dir, &p),
        other => Err(format!("unknown step {other}; {usage}")),
    };
    let doc = result.unwrap_or_else(|e| json!({"error": e}));
    fs::write(&out, serde_json::to_string(&doc).unwrap())
        .map_err(|e| format!("{}: {e}", out.display()))
}

fn config(p: &Params) -> Config {
    Config {
        segment_size: p.segment_size,
    }
}

fn build(kind: Kind, dir: &Path, p: &Params) -> Res<Value> {
    let zipf = zipf_for(p.events);
    let t = Instant::now();
    let sys = systems::open(kind, dir, &config(p))?;
    let mut i = 0;
    let mut last_report = Instant::now();
    while i < p.events {
        let n = BUILD_BATCH.min(p.events - i);
        let evs = (i..i + n)
            .map(|j| crate::skewed_event(j, &zipf, crate::EVENT_BYTES))
            .collect();
        sys.append(evs, &Cond::None)?
            .ok_or("unconditional append rejected")?;
        i += n;
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("    {} scale store: {i} of {} events", kind.name(), p.events);
            last_report = Instant::now();
        }
    }
    let append_s = t.elapsed().as_secs_f64();
    sys.close()?;
    let s = t.elapsed().as_secs_f64();
    Ok(json!({
        "events": p.events,
        "entities": zipf.entities(),
        "zipf_exponent": zipf.exponent,
        "seconds": s,
        "append_seconds": append_s,
        "events_per_s": p.events as f64 / s,
        "store_bytes": machine::dir_bytes(dir),
    }))
}

/// Times `op` after evicting the page cache of the open store's files (`crate::after_eviction`,
/// which adds what the eviction left and what `op` cost in faults and device bytes).
fn cold(dir: &Path, op: impl FnOnce() -> Res<ReadOut>) -> Value {
    crate::after_eviction(dir, || {
        let t = Instant::now();
        let out = op()?;
        let s = t.elapsed().as_secs_f64();
        if out.events == 0 {
            return Err("read nothing".into());
        }
        Ok(json!({
            "events": out.events,
            "seconds": s,
            "events_per_s": out.events as f64 / s,
        }))
    })
    .unwrap_or_else(|e| json!({"error": e}))
}

fn measure(kind: Kind, dir: &Path, p: &Params) -> Res<Value> {
    let zipf = zipf_for(p.events);
    let rare = zipf.rank_holding(p.events, EVENTS_PER_ENTITY as f64);
    // Nothing has the store open: a plain eviction drops all of it. (The parent read it through
    // first, `Scale::measure`.)
    machine::evict_dir(dir).map_err(|e| format!("evict {}: {e}", dir.display()))?;
    let resident_before = machine::resident_bytes(dir);
    let (rss0, anon0) = (
        machine::status_bytes("VmRSS"),
        machine::status_bytes("RssAnon"),
    );
    let t = Instant::now();
    let store = systems::open(kind, dir, &config(p))?;
    let head = store.head()?;
    let open_s = t.elapsed().as_secs_f64();
    let (rss1, anon1) = (
        machine::status_bytes("VmRSS"),
        machine::status_bytes("RssAnon"),
    );
    let open = json!({
        "open_ms": open_s * 1e3,
        "head": head,
        "store_bytes": machine::dir_bytes(dir),
        "rss_before_bytes": rss0,
        "rss_growth_bytes": rss1.saturating_sub(rss0),
        "anon_before_bytes": anon0,
        "anon_growth_bytes": anon1.saturating_sub(anon0),
        "resident_bytes_before_open": resident_before,
        "resident_bytes_after_open": machine::resident_bytes(dir),
    });
    let sys = store.as_ref();
    let hot = cold(dir, || sys.read(&Q::Tag("entity:0".into()), 0, None, false));
    let rare_fig = cold(dir, || {
        sys.read(&Q::Tag(format!("entity:{rare}")), 0, None, false)
    });
    let newest = cold(dir, || sys.read(&Q::Tag("entity:1".into()), 0, Some(1), true));
    let catch_up_method = if systems::unsupported(kind, "subscribe").is_some() {
        "forward read of everything in pages (no embedded subscription)"
    } else {
        "subscription to everything from 0"
    };
    let mut catch_up = cold(dir, || {
        if systems::unsupported(kind, "subscribe").is_some() {
            crate::full_scan(sys)
        } else {
            sys.catch_up(&Q::All, head)
        }
    });
    catch_up["method"] = json!(catch_up_method);
    let stale = stale_cursor(sys, p.secs).unwrap_or_else(|e| json!({"error": e}));
    store.close()?;
    Ok(json!({
        "open": open,
        "hot": hot,
        "rare": rare_fig,
        "rare_entity": rare,
        "newest": newest,
        "catch_up": catch_up,
        "stale": stale,
    }))
}

/// One writer appending single events guarded by a query on the hottest entity's tag and a
/// type none of its events has (so it never matches, and every append commits), with `after`
/// at the head, then with `after` = 1, each for a window: the ratio of the times per append.
/// One writer, so the figure is the cost of one condition check on top of one commit, and a
/// system whose check reads the whole tag (UmaDB takes about half a second per append at
/// 30k events in the tag) still finishes a window with one append in flight, not sixteen.
/// Warm: one append of each runs first, so the figure is the condition's cost, not the first
/// read of its index from disk.
pub fn stale_cursor(sys: &dyn System, secs: f64) -> Res<Value> {
    let guard = |after: u64| Cond::Guard {
        ty: crate::WRITE_TYPE,
        tag: "entity:0".into(),
        after: Some(after),
    };
    let head = sys.head()?;
    for after in [head, 1] {
        sys.append(vec![stale_event("stale-warm", after)], &guard(after))?
            .ok_or("warm-up append rejected")?;
    }
    let head = sys.head()?;
    let at_head = crate::write_cell(sys, 1, 1, secs, "stale-head", head, None, &|_, last| {
        guard(last)
    })?;
    let at_one = crate::write_cell(sys, 1, 1, secs, "stale-one", head, None, &|_, _| guard(1))?;
    let (h, o) = (
        at_head["value"].as_f64().unwrap_or(f64::NAN),
        at_one["value"].as_f64().unwrap_or(f64::NAN),
    );
    Ok(json!({"ratio": h / o, "after_head_events_per_s": h, "after_one_events_per_s": o,
              "after_head": at_head, "after_one": at_one}))
}

fn stale_event(tag: &str, i: u64) -> Ev {
    Ev {
        ty: crate::WRITE_TYPE,
        tags: vec![format!("{tag}:{i}")],
        data: crate::payload(i),
    }
}

fn writer_memory(kind: Kind, dir: &Path, p: &Params) -> Res<Value> {
    let zipf = zipf_for(p.events);
    let anon_before = machine::status_bytes("RssAnon");
    let sys = systems::open(kind, dir, &config(p))?;
    let stop = AtomicBool::new(false);
    // (seconds since start, RssAnon, VmRSS)
    let samples: Mutex<Vec<(f64, u64, u64)>> = Mutex::new(Vec::new());
    let t = Instant::now();
    let appended = std::thread::scope(|s| -> Res<f64> {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let sample = (
                    t.elapsed().as_secs_f64(),
                    machine::status_bytes("RssAnon"),
                    machine::status_bytes("VmRSS"),
                );
                samples.lock().unwrap().push(sample);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let run = || -> Res<f64> {
            let mut i = 0;
            while i < p.events {
                let n = BUILD_BATCH.min(p.events - i);
                let evs = (i..i + n)
                    .map(|j| {
                        let u = (crate::Rng::new(j ^ 0x3E3D).next() >> 11) as f64
                            / (1u64 << 53) as f64;
                        Ev {
                            ty: "Seeded",
                            tags: vec![
                                format!("entity:{}", zipf.sample(u)),
                                format!("s10:{}", j % 10),
                                format!("u:{j}"),
                            ],
                            data: crate::payload(j),
                        }
                    })
                    .collect();
                sys.append(evs, &Cond::None)?
                    .ok_or("unconditional append rejected")?;
                i += n;
            }
            Ok(t.elapsed().as_secs_f64())
        };
        let r = run();
        stop.store(true, Ordering::Relaxed);
        r
    })?;
    let close_t = Instant::now();
    sys.close()?;
    let close_s = close_t.elapsed().as_secs_f64();
    let samples = samples.into_inner().unwrap();
    let peak = samples.iter().map(|s| s.1).max().unwrap_or(0);
    let mut second_half: Vec<u64> = samples
        .iter()
        .filter(|s| s.0 >= appended / 2.0 && s.0 <= appended)
        .map(|s| s.1)
        .collect();
    second_half.sort_unstable();
    let steady = second_half
        .get(second_half.len() / 2)
        .copied()
        .ok_or("no RssAnon sample in the second half of appending")?;
    Ok(json!({
        "events": p.events,
        "append_seconds": appended,
        "events_per_s": p.events as f64 / appended,
        "close_seconds": close_s,
        "anon_before_open_bytes": anon_before,
        "peak_anon_bytes": peak,
        "steady_anon_bytes": steady,
        "peak_rss_bytes": samples.iter().map(|s| s.2).max().unwrap_or(0),
        "store_bytes": machine::dir_bytes(dir),
        "samples": samples.iter().map(|s| json!([(s.0 * 10.0).round() / 10.0, s.1 / 1024, s.2 / 1024])).collect::<Vec<_>>(),
        "samples_format": "[seconds, RssAnon KiB, VmRSS KiB]",
    }))
}
