//! Lapilli side by side with Tephra, UmaDB and the machine's limits, in one process run,
//! interleaving the systems round by round (`shared/BENCHMARKS.md`).
//!
//! ```sh
//! cargo run --release --manifest-path bench/Cargo.toml -- --quick --out bench/results
//! ```

mod machine;
mod report;
mod scale;
mod systems;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use systems::{Cond, Config, Ev, Kind, Q, Res, System};

pub const EVENT_BYTES: usize = 256;
pub const WRITE_TYPE: &str = "Written";

/// splitmix64: a tiny seeded generator, so a rerun reads the same entities.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn mix(i: u64) -> u64 {
    Rng::new(i ^ 0x5EED).next()
}

#[derive(Clone)]
pub struct Scale {
    pub name: &'static str,
    pub rounds: usize,
    /// Events in each read corpus (and the store of W3/W4 and startup).
    pub corpus: u64,
    /// Entities tagged `entity:<n>` in the corpus.
    pub entities: u64,
    /// Length of each timed window.
    pub secs: f64,
    pub segment_size: u64,
    /// Distinct entities read cold in R3 per round (spread over 16 readers).
    pub cold_entities: usize,
    /// Events of 1 KiB in the second corpus, read cold only (R3).
    pub corpus_1k: u64,
    pub live_events: usize,
    /// Appends per writer thread in each W3/W4 cell (16 threads), the same for every system.
    pub corpus_appends: u64,
    /// Events of the recent tag appended to the corpus each round (R4).
    pub hot_events: u64,
    /// Events of the scale cells' store, built once per system in a child process.
    pub scale_events: u64,
    /// Events the writer-memory cell appends.
    pub writer_events: u64,
    pub limits: machine::LimitScale,
}

impl Scale {
    fn quick() -> Scale {
        Scale {
            name: "quick",
            rounds: 3,
            corpus: 200_000,
            entities: 2_000,
            // Half a second, not a full one: with the skewed, scale and writer-memory cells
            // of issue 14 the quick run still ends in under 5 minutes on 2 shared cores.
            secs: 0.5,
            // Scaled down with the corpus (2M -> 200k), so the corpus still spans sealed
            // segments and startup and cold reads see them.
            segment_size: 32 << 20,
            cold_entities: 64,
            corpus_1k: 50_000,
            live_events: 100,
            corpus_appends: 200,
            hot_events: 10_000,
            // Cut from the 1M the issue allows: UmaDB builds 1M events in about a minute here.
            scale_events: 500_000,
            writer_events: 250_000,
            limits: machine::LimitScale {
                fsync_appends: 200,
                seq_bytes: 256 << 20,
                random_reads: 4000,
            },
        }
    }

    fn full() -> Scale {
        Scale {
            name: "full",
            rounds: 5,
            corpus: 2_000_000,
            entities: 20_000,
            secs: 3.0,
            segment_size: 256 << 20,
            cold_entities: 256,
            corpus_1k: 500_000,
            live_events: 300,
            corpus_appends: 1000,
            hot_events: 100_000,
            scale_events: 10_000_000,
            writer_events: 7_000_000,
            limits: machine::LimitScale {
                fsync_appends: 1000,
                seq_bytes: 1 << 30,
                random_reads: 20000,
            },
        }
    }
}

/// Event `i`'s incompressible payload: xorshift64, all 8 bytes of each step. (One byte a step
/// cost 0.8 us an event, a fifth of both cores in the batched write cells, taken from whichever
/// store was measured: the harness's cost, not the store's.)
pub fn payload(i: u64) -> Vec<u8> {
    let mut d = Vec::with_capacity(EVENT_BYTES);
    let mut x = i.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    while d.len() < EVENT_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        d.extend_from_slice(&x.to_le_bytes());
    }
    d.truncate(EVENT_BYTES);
    d
}

/// Corpus event `i`: one entity, and the graded tags selecting about 1/10, 1/100, 1/1000.
fn corpus_event(i: u64, entities: u64, bytes: usize) -> Ev {
    seeded_event(i, mix(i) % entities, bytes)
}

/// Share of all events carried by the hottest entity of the skewed corpora.
pub const HOT_SHARE: f64 = 0.15;

/// Entity popularity in the skewed corpora, the shape of real stores: Zipf over `n`
/// entities, its exponent chosen so the hottest (rank 0, `entity:0`) carries `HOT_SHARE` of
/// all events. With 2,000 entities (exponent 1.06) the next ones carry 7.2%, 4.7%, 3.5%,
/// 2.7%..., the last about 1/20,000 of the log; with 100,000 entities (10M events, exponent
/// 1.13) the hottest holds 1.5M events, the second 690k, the last three or four.
pub struct Zipf {
    cdf: Vec<f64>,
    pub exponent: f64,
}

impl Zipf {
    pub fn new(n: u64, top_share: f64) -> Zipf {
        let n = n.max(1);
        let sum = |s: f64| (1..=n).map(|r| (r as f64).powf(-s)).sum::<f64>();
        // The top share 1/H(n, s) grows with s: bisect for it.
        let (mut lo, mut hi) = (0.0f64, 8.0f64);
        for _ in 0..50 {
            let mid = (lo + hi) / 2.0;
            if 1.0 / sum(mid) < top_share {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let exponent = (lo + hi) / 2.0;
        let total = sum(exponent);
        let mut acc = 0.0;
        let cdf = (1..=n)
            .map(|r| {
                acc += (r as f64).powf(-exponent) / total;
                acc
            })
            .collect();
        Zipf { cdf, exponent }
    }

    pub fn entities(&self) -> u64 {
        self.cdf.len() as u64
    }

    /// The entity (rank) at uniform `u` in [0, 1).
    pub fn sample(&self, u: f64) -> u64 {
        (self.cdf.partition_point(|&c| c <= u) as u64).min(self.entities() - 1)
    }

    /// Expected share of the events of entity `rank`.
    pub fn share(&self, rank: u64) -> f64 {
        let r = rank as usize;
        self.cdf[r] - if r == 0 { 0.0 } else { self.cdf[r - 1] }
    }

    /// The first entity expected to hold at most `count` of `total` events: the rare entity
    /// the scale cells read (an entity of the ordinary size, ~100 events).
    pub fn rank_holding(&self, total: u64, count: f64) -> u64 {
        (0..self.entities())
            .find(|&r| self.share(r) * total as f64 <= count)
            .unwrap_or(self.entities() - 1)
    }
}

/// Skewed corpus event `i`: the even corpus's shape (type, graded tags, payload), its entity
/// drawn from `zipf` instead of uniformly.
pub fn skewed_event(i: u64, zipf: &Zipf, bytes: usize) -> Ev {
    seeded_event(i, skewed_rank(i, zipf), bytes)
}

/// The entity (rank) of skewed corpus event `i`.
fn skewed_rank(i: u64, zipf: &Zipf) -> u64 {
    let u = (Rng::new(i ^ 0x5CE3ED).next() >> 11) as f64 / (1u64 << 53) as f64;
    zipf.sample(u)
}

/// The ranks from `from` that hold at least one event of the skewed corpus of `events`. At
/// full scale (2M events, 20,000 entities) much of the tail holds none, and a newest-event read
/// of such an entity answers nothing: the cell failed for every system until it picked from these.
fn ranks_with_events(zipf: &Zipf, events: u64, from: u64) -> Vec<u64> {
    let mut held = vec![false; zipf.entities() as usize];
    for i in 0..events {
        held[skewed_rank(i, zipf) as usize] = true;
    }
    (from..zipf.entities()).filter(|&rank| held[rank as usize]).collect()
}

fn seeded_event(i: u64, entity: u64, bytes: usize) -> Ev {
    let h = mix(i);
    Ev {
        ty: "Seeded",
        tags: vec![
            format!("entity:{entity}"),
            format!("s10:{}", i % 10),
            format!("s100:{}", (h >> 20) % 100),
            format!("s1000:{}", (h >> 36) % 1000),
        ],
        data: {
            let mut d = payload(i);
            d.resize(bytes, 0x33);
            d
        },
    }
}

// ------------------------------------------------------------------ results

pub struct Cell {
    pub id: String,
    pub group: &'static str,
    pub desc: String,
    pub unit: &'static str,
    pub higher_is_better: bool,
    /// Per system: one entry per round, a figure object or why there is none.
    pub figures: BTreeMap<&'static str, Vec<Result<Value, String>>>,
}

#[derive(Default)]
pub struct Results {
    pub cells: Vec<Cell>,
}

impl Results {
    pub fn record(
        &mut self,
        id: &str,
        group: &'static str,
        desc: &str,
        unit: &'static str,
        hib: bool,
        kind: Kind,
        fig: Res<Value>,
    ) {
        if let Err(e) = &fig {
            eprintln!("    {id} {}: {e}", kind.name());
        } else if let Ok(v) = &fig {
            eprintln!(
                "    {id:<28} {:<8} {:>14.1} {unit}",
                kind.name(),
                v["value"].as_f64().unwrap_or(f64::NAN)
            );
        }
        let cell = match self.cells.iter_mut().position(|c| c.id == id) {
            Some(i) => &mut self.cells[i],
            None => {
                self.cells.push(Cell {
                    id: id.into(),
                    group,
                    desc: desc.into(),
                    unit,
                    higher_is_better: hib,
                    figures: BTreeMap::new(),
                });
                self.cells.last_mut().unwrap()
            }
        };
        cell.figures.entry(kind.name()).or_default().push(fig);
    }
}

// ------------------------------------------------------------------ drivers

fn deadline(secs: f64) -> Instant {
    Instant::now() + Duration::from_secs_f64(secs)
}

/// `threads` writers, each appending `batch` events per append until the window closes, each
/// append guarded by `cond(thread, seq, unique_tag, last_seen)`.
pub fn write_cell(
    sys: &dyn System,
    threads: usize,
    batch: usize,
    secs: f64,
    prefix: &str,
    start_after: u64,
    // A cap on appends per thread: the cells on the corpus append the same number of events
    // to every system, so the corpus stays alike across systems and rounds.
    max_appends: Option<u64>,
    cond: &(dyn Fn(&str, u64) -> Cond + Sync),
) -> Res<Value> {
    let last_seen = AtomicU64::new(start_after);
    let groups_before = sys.group_commits();
    let end = deadline(secs);
    let t0 = Instant::now();
    let per_thread: Vec<Res<(u64, u64, u64, Vec<Duration>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let last_seen = &last_seen;
                s.spawn(move || -> Res<(u64, u64, u64, Vec<Duration>)> {
                    let (mut appends, mut events, mut rejected) = (0u64, 0u64, 0u64);
                    let mut lat = Vec::new();
                    let mut seq = 0u64;
                    while Instant::now() < end || max_appends.is_some() {
                        if max_appends.is_some_and(|m| appends + rejected >= m) {
                            break;
                        }
                        let tag = format!("{prefix}:{t}:{seq}");
                        seq += 1;
                        let evs = (0..batch)
                            .map(|i| Ev {
                                ty: WRITE_TYPE,
                                tags: vec![tag.clone()],
                                data: payload(seq * 1000 + i as u64),
                            })
                            .collect();
                        let c = cond(&tag, last_seen.load(Ordering::Relaxed));
                        let a = Instant::now();
                        match sys.append(evs, &c)? {
                            Some(last) => {
                                lat.push(a.elapsed());
                                last_seen.fetch_max(last, Ordering::Relaxed);
                                appends += 1;
                                events += batch as u64;
                            }
                            None => rejected += 1,
                        }
                    }
                    Ok((appends, events, rejected, lat))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("writer panicked".into())))
            .collect()
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let (mut appends, mut events, mut rejected, mut lat) = (0, 0, 0, Vec::new());
    for r in per_thread {
        let (a, e, rj, l) = r?;
        appends += a;
        events += e;
        rejected += rj;
        lat.extend(l);
    }
    if events == 0 && rejected > 0 {
        return Err(format!(
            "every append ({rejected}) was rejected by its condition"
        ));
    }
    let (p50, p99) = machine::p50_p99(lat);
    let groups = match (groups_before, sys.group_commits()) {
        (Some(a), Some(b)) => json!(b - a),
        _ => Value::Null,
    };
    Ok(json!({
        "group_commits": groups,
        "value": events as f64 / elapsed,
        "appends_per_s": appends as f64 / elapsed,
        "events": events, "appends": appends,
        "rejected_appends": rejected,
        "latency_p50_us": p50, "latency_p99_us": p99,
        "seconds": elapsed,
    }))
}

/// `threads` readers, each running `op(rng)` until the window closes.
fn read_cell(
    sys: &dyn System,
    threads: usize,
    secs: f64,
    seed: u64,
    op: &(dyn Fn(&dyn System, &mut Rng) -> Res<systems::ReadOut> + Sync),
) -> Res<Value> {
    let end = deadline(secs);
    let t0 = Instant::now();
    let per: Vec<Res<(u64, u64, u64)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Res<(u64, u64, u64)> {
                    let mut rng = Rng::new(seed ^ (t as u64 + 1) * 0x1234567);
                    let (mut ops, mut events, mut bytes) = (0, 0, 0);
                    while Instant::now() < end {
                        let out = op(sys, &mut rng)?;
                        ops += 1;
                        events += out.events;
                        bytes += out.bytes;
                    }
                    Ok((ops, events, bytes))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("reader panicked".into())))
            .collect()
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let (mut ops, mut events, mut bytes) = (0, 0, 0);
    for r in per {
        let (o, e, b) = r?;
        ops += o;
        events += e;
        bytes += b;
    }
    if events == 0 {
        return Err("read nothing".into());
    }
    Ok(json!({
        "value": events as f64 / elapsed,
        "reads_per_s": ops as f64 / elapsed,
        "mean_read_us": elapsed * threads as f64 / ops.max(1) as f64 * 1e6,
        "events": events, "reads": ops, "payload_bytes": bytes, "seconds": elapsed,
    }))
}

/// One reader running `op` until the window closes: operations per second and mean latency.
fn op_cell(
    sys: &dyn System,
    secs: f64,
    seed: u64,
    op: &dyn Fn(&dyn System, &mut Rng) -> Res<u64>,
) -> Res<Value> {
    let end = deadline(secs);
    let mut rng = Rng::new(seed);
    let t0 = Instant::now();
    let (mut ops, mut events) = (0u64, 0u64);
    while Instant::now() < end {
        let n = op(sys, &mut rng)?;
        if n == 0 {
            return Err("an operation returned no event".into());
        }
        events += n;
        ops += 1;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    Ok(json!({
        "value": ops as f64 / elapsed,
        "mean_us": elapsed / ops as f64 * 1e6,
        "ops": ops, "events": events, "seconds": elapsed,
    }))
}

// ------------------------------------------------------------------ the run

struct Args {
    scale: Scale,
    out: PathBuf,
    systems: Vec<Kind>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut scale = Scale::full();
    let mut out = PathBuf::from("bench/results");
    let mut systems = Kind::ALL.to_vec();
    let mut overrides: Vec<(String, String)> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => scale = Scale::quick(),
            "--full" => scale = Scale::full(),
            "--out" => out = args.next().ok_or("--out needs a directory")?.into(),
            "--systems" => {
                let list = args.next().ok_or("--systems needs a list")?;
                systems = list
                    .split(',')
                    .map(|s| {
                        Kind::CHOOSABLE
                            .into_iter()
                            .find(|k| k.name() == s)
                            .ok_or(format!("unknown system {s}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--only" => {
                let list = args.next().ok_or("--only needs a list")?;
                let _ = ONLY.set(list.split('|').map(String::from).collect());
                scale.name = "partial";
            }
            "--rounds" | "--corpus" | "--secs" | "--entities" | "--scale-events"
            | "--writer-events" => {
                overrides.push((a.clone(), args.next().ok_or(format!("{a} needs a value"))?))
            }
            "-h" | "--help" => {
                println!(
                    "lapilli-bench [--quick|--full] [--out DIR] [--systems lapilli,tephra,umadb,postgres]\n\
                     \t[--rounds N] [--corpus EVENTS] [--entities N] [--secs WINDOW]\n\
                     \t[--scale-events N] [--writer-events N] [--only 'CELL-SUBSTRING|...']\n\
                     (--only matches cell names ignoring case; 'scale' and 'writer memory'\n\
                     alone run only the child-process cells)"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    for (k, v) in overrides {
        let bad = |_| format!("bad value {v} for {k}");
        match k.as_str() {
            "--rounds" => scale.rounds = v.parse().map_err(bad)?,
            "--corpus" => scale.corpus = v.parse().map_err(bad)?,
            "--entities" => scale.entities = v.parse().map_err(bad)?,
            "--scale-events" => scale.scale_events = v.parse().map_err(bad)?,
            "--writer-events" => scale.writer_events = v.parse().map_err(bad)?,
            "--secs" => scale.secs = v.parse().map_err(|_| format!("bad value {v} for {k}"))?,
            _ => unreachable!(),
        }
        scale.name = "custom";
    }
    Ok(Args {
        scale,
        out,
        systems,
    })
}

/// R3: `count` distinct entities read once each by 16 readers, events/s.
fn cold_read(sys: &dyn System, count: usize, entities: u64, seed: u64) -> Res<Value> {
    let mut rng = Rng::new(seed ^ 0xC01D);
    let mut picks: Vec<u64> = Vec::new();
    while picks.len() < count.min(entities as usize) {
        let e = rng.below(entities);
        if !picks.contains(&e) {
            picks.push(e);
        }
    }
    let next = AtomicU64::new(0);
    let t = Instant::now();
    let per: Vec<Res<(u64, u64)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..16)
            .map(|_| {
                let (picks, next) = (&picks, &next);
                s.spawn(move || -> Res<(u64, u64)> {
                    let (mut events, mut reads) = (0, 0);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                        let Some(e) = picks.get(i) else { break };
                        events += sys
                            .read(&Q::Tag(format!("entity:{e}")), 0, None, false)?
                            .events;
                        reads += 1;
                    }
                    Ok((events, reads))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("reader panicked".into())))
            .collect()
    });
    let el = t.elapsed().as_secs_f64();
    let v = per.into_iter().collect::<Res<Vec<_>>>()?;
    let events: u64 = v.iter().map(|x| x.0).sum();
    if events == 0 {
        return Err("read nothing".into());
    }
    Ok(
        json!({"value": events as f64 / el, "events": events, "entities": picks.len(), "seconds": el}),
    )
}

/// R3 on an open store: evicts its pages first (`after_eviction`), so the reads are served by
/// the disk and not by what the open read.
fn cold_read_after_open(
    sys: &dyn System,
    dir: &Path,
    count: usize,
    entities: u64,
    seed: u64,
) -> Res<Value> {
    after_eviction(dir, || cold_read(sys, count, entities, seed))
}

/// Runs `op` after evicting the open store's pages (mappings included,
/// `machine::evict_open_dir`), and adds to its figure what the eviction left and what `op` cost
/// in I/O: the store bytes still resident, the mapped bytes dropped, and the major faults and
/// device bytes of the whole process (a cell's reader threads included). R3's and the scale
/// cells' cold reads.
fn after_eviction(dir: &Path, op: impl FnOnce() -> Res<Value>) -> Res<Value> {
    let unmapped = machine::evict_open_dir(dir).map_err(|e| format!("evict: {e}"))?;
    let resident = machine::resident_bytes(dir);
    let (faults, read_from_storage) = (machine::major_faults(), machine::storage_read_bytes());
    let mut fig = op()?;
    fig["major_faults"] = json!(machine::major_faults() - faults);
    fig["storage_read_bytes"] = json!(machine::storage_read_bytes() - read_from_storage);
    fig["resident_bytes_after_evict"] = json!(resident);
    fig["mapped_bytes_dropped"] = json!(unmapped);
    Ok(fig)
}

/// A cold cell's figure with what `machine::read_through` read before it, and how fast: the
/// rate says how much of the store the host's cache held.
fn with_read_through(mut fig: Value, bytes: u64, seconds: f64) -> Value {
    fig["read_through_bytes"] = json!(bytes);
    fig["read_through_seconds"] = json!(seconds);
    fig
}

/// Events per read of the full scan. UmaDB's `read` materialises its whole result, and 16
/// readers of a 2M-event store would hold 16 copies of it; so above this size every system
/// scans in pages (`after` = the last position of the page before).
const SCAN_PAGE: u64 = 500_000;

/// R2's full scan: everything from position 0, in pages of `SCAN_PAGE` events.
pub fn full_scan(s: &dyn System) -> Res<systems::ReadOut> {
    let mut total = systems::ReadOut::default();
    loop {
        let page = s.read(&Q::All, total.last, Some(SCAN_PAGE), false)?;
        total.events += page.events;
        total.bytes += page.bytes;
        if page.events < SCAN_PAGE {
            return Ok(total);
        }
        total.last = page.last;
    }
}

const STALE_COST: &str = "W4 stale cursor cost (after = 1 / after = head)";
const SKEWED_STALE_COST: &str =
    "W4 skewed stale cursor cost (after = 1 / after = head), hot entity";

/// The cells of the skewed corpus.
const SKEWED_CELLS: [&str; 10] = [
    "R1 skewed, hot entity, 16 readers",
    "R1 skewed, tail entity, 16 readers",
    "R2 skewed, entities ranked 2-6, 16 readers",
    "R4 skewed, last event of the hot entity",
    "R4 skewed, last event of a tail entity",
    "R5 skewed, catch-up of the hot entity",
    "W3 skewed uniqueness guard, hot entity",
    "W4 skewed head-first (after = head), hot entity",
    "W4 skewed stale cursor (after = 1), hot entity",
    SKEWED_STALE_COST,
];

/// The stale cursor's cost: the time of an append guarded with `after` = 1 over one guarded
/// at the head, from the two rates of one system in one round.
fn stale_cost(at_head: Option<&f64>, at_one: Option<&f64>) -> Res<Value> {
    match (at_head, at_one) {
        (Some(&h), Some(&o)) if h > 0.0 && o > 0.0 => Ok(json!({
            "value": h / o,
            "after_head_events_per_s": h,
            "after_one_events_per_s": o,
        })),
        _ => Err("no figure for one of its two cells".into()),
    }
}

/// One round of the cells on the skewed corpus (entity:0 holds 15% of the events, the next
/// five a few % each, the tail (ranks past the first tenth) about 100 or fewer each).
#[allow(clippy::too_many_arguments)]
fn skewed_round(
    results: &mut Results,
    skewed: &BTreeMap<&'static str, Box<dyn System>>,
    run_dir: &Path,
    order: &[Kind],
    zipf: &Zipf,
    hot_events: u64,
    scale: &Scale,
    round: usize,
    seed: u64,
) -> Result<(), String> {
    let secs = scale.secs;
    for &k in order {
        machine::warm_dir(&run_dir.join("corpus-skewed").join(k.name()));
    }
    let n = zipf.entities();
    let tail_from = (n / 10).max(1).min(n - 1);
    let hot_desc = format!(
        "{:.0}% of the corpus, {hot_events} events",
        HOT_SHARE * 100.0
    );
    let reads: [(&str, String, &(dyn Fn(&mut Rng) -> u64 + Sync)); 3] = [
        (
            SKEWED_CELLS[0],
            format!("the whole hottest entity ({hot_desc}), events/s"),
            &|_| 0,
        ),
        (
            SKEWED_CELLS[1],
            format!("one tail entity's events (ranks {tail_from} to {n}), events/s"),
            &|rng| tail_from + rng.below(n - tail_from),
        ),
        (
            SKEWED_CELLS[2],
            format!(
                "one of the entities ranked 2 to 6 ({:.1}% to {:.1}% of the corpus each), events/s",
                zipf.share(5) * 100.0,
                zipf.share(1) * 100.0
            ),
            &|rng| 1 + rng.below(5),
        ),
    ];
    for (id, desc, pick) in reads {
        if !want(id) {
            continue;
        }
        for &k in order {
            let fig = read_cell(skewed[k.name()].as_ref(), 16, secs, seed, &|s, rng| {
                s.read(&Q::Tag(format!("entity:{}", pick(rng))), 0, None, false)
            });
            let group = &id[..2];
            let group = if group == "R1" { "R1" } else { "R2" };
            results.record(id, group, &desc, "events/s", true, k, fig);
        }
    }
    let tail_held = ranks_with_events(zipf, scale.corpus, tail_from);
    let newest: [(&str, String, &(dyn Fn(&mut Rng) -> u64 + Sync)); 2] = [
        (
            SKEWED_CELLS[3],
            format!("newest event of the hottest entity ({hot_desc}), backwards limit 1, reads/s"),
            &|_| 0,
        ),
        (
            SKEWED_CELLS[4],
            format!(
                "newest event of a tail entity (one of the {} ranks from {tail_from} to {n} that hold events), backwards limit 1, reads/s",
                tail_held.len()
            ),
            // None held (a corpus too small for its tail): the cell reports no event.
            &|rng| tail_held.get(rng.below(tail_held.len().max(1) as u64) as usize).copied().unwrap_or(tail_from),
        ),
    ];
    for (id, desc, pick) in newest {
        if !want(id) {
            continue;
        }
        for &k in order {
            let fig = op_cell(skewed[k.name()].as_ref(), secs, seed, &|s, rng| {
                Ok(s.read(&Q::Tag(format!("entity:{}", pick(rng))), 0, Some(1), true)?
                    .events)
            });
            results.record(id, "R4", &desc, "reads/s", true, k, fig);
        }
    }
    if want(SKEWED_CELLS[5]) {
        for &k in order {
            let sys = skewed[k.name()].as_ref();
            let fig = systems::unsupported(k, "subscribe")
                .map(|e| Err(e.to_string()))
                .unwrap_or_else(|| {
                    let t = Instant::now();
                    let out = sys.catch_up(&Q::Tag("entity:0".into()), hot_events)?;
                    let s = t.elapsed().as_secs_f64();
                    Ok(json!({"value": out.events as f64 / s, "events": out.events, "seconds": s}))
                });
            results.record(
                SKEWED_CELLS[5],
                "R5",
                &format!("subscription to the hottest entity's tag ({hot_desc}) from 0 until caught up, events/s"),
                "events/s",
                true,
                k,
                fig,
            );
        }
    }
    // Guards on the hottest entity's tag with a type none of its events has: they never
    // match, so every append commits, but the condition has the biggest tag to look at.
    // Windows, not W3/W4's fixed counts, and 4 writers, not 16: a system whose check reads
    // the whole tag (UmaDB: about half a second an append at 30k events) would otherwise
    // take minutes a cell. The appended events carry only a tag of their own, so the hot
    // entity stays the same size whatever count each system appends.
    let guard = |after: Option<u64>| Cond::Guard {
        ty: WRITE_TYPE,
        tag: "entity:0".into(),
        after,
    };
    let conds: [(&str, &str, &(dyn Fn(u64) -> Cond + Sync)); 3] = [
        (
            SKEWED_CELLS[6],
            "guard on the hottest entity's tag (a type it has no event of) with `after` omitted, 4 writers appending single events for a window, events/s",
            &|_last| guard(None),
        ),
        (
            SKEWED_CELLS[7],
            "the same guard with `after` at the head, events/s",
            &|last| guard(Some(last)),
        ),
        (
            SKEWED_CELLS[8],
            "the same guard with `after` = 1, events/s",
            &|_last| guard(Some(1)),
        ),
    ];
    let ratio_wanted = want(SKEWED_STALE_COST);
    let mut rates: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for (ci, (id, desc, mk)) in conds.into_iter().enumerate() {
        if !want(id) && !(ratio_wanted && id != SKEWED_CELLS[6]) {
            continue;
        }
        for &k in order {
            let sys = skewed[k.name()].as_ref();
            let head = sys.head()?;
            let prefix = format!("skew-{}-{ci}-{round}", &id[..2]);
            let fig = write_cell(sys, 4, 1, secs, &prefix, head, None, &|_tag, last| mk(last));
            if let Ok(v) = &fig {
                rates.insert((id, k.name()), v["value"].as_f64().unwrap_or(f64::NAN));
            }
            results.record(id, &id[..2], desc, "events/s", true, k, fig);
        }
    }
    for &k in order.iter().filter(|_| ratio_wanted) {
        let fig = stale_cost(
            rates.get(&(SKEWED_CELLS[7], k.name())),
            rates.get(&(SKEWED_CELLS[8], k.name())),
        );
        results.record(
            SKEWED_STALE_COST,
            "W4",
            "time per append guarded on the hottest entity with `after` = 1 over one with `after` = the head (the two rows above, same round), x",
            "x",
            false,
            k,
            fig,
        );
    }
    Ok(())
}

static ONLY: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Whether the cell `id` runs (`--only` narrows the run to cells containing one of its
/// strings, ignoring case).
fn want(id: &str) -> bool {
    let id = id.to_lowercase();
    ONLY.get().is_none_or(|only| {
        only.is_empty() || only.iter().any(|o| id.contains(&o.to_lowercase()))
    })
}

/// Whether any cell of this process (rather than of the scale children) runs: `--only`
/// strings that all start with "scale" or "writer memory" skip the corpora.
fn want_in_process() -> bool {
    ONLY.get().is_none_or(|only| {
        only.is_empty()
            || only.iter().any(|o| {
                let o = o.to_lowercase();
                !(o.starts_with("scale") || o.starts_with("writer memory"))
            })
    })
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Drops the run's Postgres contexts when `main` returns or a panic unwinds it (not on a
/// signal: a run stopped with Ctrl-C leaves its contexts, named `b<run>_...`).
struct DropPostgresContexts;

impl Drop for DropPostgresContexts {
    fn drop(&mut self) {
        if let Err(e) = systems::drop_postgres_contexts() {
            eprintln!("lapilli-bench: warning: {e}");
        }
    }
}

fn main() {
    let cleanup = DropPostgresContexts;
    let outcome = run();
    drop(cleanup);
    if let Err(e) = outcome {
        eprintln!("lapilli-bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    // `--render FILE.json`: write the Markdown table of a finished run again, beside it.
    let argv: Vec<String> = std::env::args().collect();
    // The hidden subcommand of the scale cells' child processes (scale.rs).
    if argv.get(1).map(String::as_str) == Some("scale-child") {
        return scale::child_main(&argv[2..]);
    }
    if argv.len() == 3 && argv[1] == "--render" {
        let path = PathBuf::from(&argv[2]);
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        let md = path.with_extension("md");
        fs::write(&md, report::markdown(&doc)).map_err(|e| e.to_string())?;
        eprintln!("wrote {}", md.display());
        return Ok(());
    }
    let args = parse_args()?;
    let scale = args.scale.clone();
    let root = repo_root();
    let data = root.join("target").join("bench-data");
    fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let fs_name = machine::filesystem(&data)?;
    let _ = fs::remove_dir_all(data.join("run"));
    let run_dir = data.join("run");
    fs::create_dir_all(&run_dir).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let load_start = machine::loadavg();
    eprintln!(
        "lapilli-bench: {} scale: {} rounds, corpus {} events of {EVENT_BYTES} bytes ({} entities), \
         {} s windows, segments {} MiB; data in {} ({fs_name}); load {load_start}",
        scale.name,
        scale.rounds,
        scale.corpus,
        scale.entities,
        scale.secs,
        scale.segment_size >> 20,
        run_dir.display()
    );
    if scale.name == "quick" {
        eprintln!(
            "  (quick: corpora of 200k events instead of 2M; W3 on 200k instead of 1M; startup row on the corpus; scale cells on 500k events, not 10M; writer memory on 250k, not 7M; 0.5 s windows, not 3 s)"
        );
    }
    let config = Config {
        segment_size: scale.segment_size,
    };
    let mut results = Results::default();
    let mut limits = Vec::new();
    let systems = args.systems.clone();

    // Corpora, one per system, built once: 256-byte events for everything, and 1 KiB events
    // for the second cold read.
    let mut corpus: BTreeMap<&'static str, Box<dyn System>> = BTreeMap::new();
    let mut corpus_1k: BTreeMap<&'static str, Box<dyn System>> = BTreeMap::new();
    let mut build = BTreeMap::new();
    let entities_1k = (scale.corpus_1k / 100).max(1);
    for &k in systems.iter().filter(|_| want("R3 cold selective, 1 KiB")) {
        let dir = run_dir.join("corpus-1k").join(k.name());
        let sys = systems::open(k, &dir, &config)?;
        let mut i = 0;
        while i < scale.corpus_1k {
            let n = 250.min(scale.corpus_1k - i);
            let evs = (i..i + n)
                .map(|j| corpus_event(j, entities_1k, 1024))
                .collect();
            sys.append(evs, &Cond::None)?
                .ok_or("unconditional append rejected")?;
            i += n;
        }
        sys.settle()?;
        eprintln!(
            "  built {} 1 KiB corpus: {} events",
            k.name(),
            scale.corpus_1k
        );
        corpus_1k.insert(k.name(), sys);
    }
    // The even corpus (entities drawn uniformly) and the skewed one (the same events, their
    // entity drawn from `Zipf`: entity:0 holds 15% of them).
    let zipf = Zipf::new(scale.entities, HOT_SHARE);
    let skew_hot_events = (0..scale.corpus)
        .filter(|&i| skewed_event(i, &zipf, 0).tags[0] == "entity:0")
        .count() as u64;
    let mut skewed: BTreeMap<&'static str, Box<dyn System>> = BTreeMap::new();
    let mut build_skewed = BTreeMap::new();
    let want_skewed = want_in_process() && SKEWED_CELLS.iter().any(|id| want(id));
    for &k in systems.iter().filter(|_| want_in_process()) {
        for (name, map, builds) in [
            ("corpus", &mut corpus, &mut build),
            ("corpus-skewed", &mut skewed, &mut build_skewed),
        ] {
            if name == "corpus-skewed" && !want_skewed {
                continue;
            }
            let dir = run_dir.join(name).join(k.name());
            let sys = systems::open(k, &dir, &config)?;
            let t = Instant::now();
            let chunk = 1000u64;
            let mut i = 0;
            while i < scale.corpus {
                let n = chunk.min(scale.corpus - i);
                let evs = (i..i + n)
                    .map(|j| {
                        if name == "corpus" {
                            corpus_event(j, scale.entities, EVENT_BYTES)
                        } else {
                            skewed_event(j, &zipf, EVENT_BYTES)
                        }
                    })
                    .collect();
                sys.append(evs, &Cond::None)?
                    .ok_or("unconditional append rejected")?;
                i += n;
            }
            let secs = t.elapsed().as_secs_f64();
            sys.settle()?;
            eprintln!(
                "  built {} {name}: {} events in {secs:.1} s",
                k.name(),
                scale.corpus
            );
            builds.insert(k.name(), json!({"events": scale.corpus, "seconds": secs, "events_per_s": scale.corpus as f64 / secs}));
            // Closed and reopened once, so every round starts from a cleanly closed corpus.
            sys.close()?;
            map.insert(k.name(), systems::open(k, &dir, &config)?);
        }
    }

    // The scale cells' stores: one per system, built once, each by a child process.
    let scale_run = scale::Scale {
        dir: run_dir.join("scale"),
        events: scale.scale_events,
        writer_events: scale.writer_events,
        segment_size: lapilli_core::Options::default().segment_size,
        secs: scale.secs,
    };
    let mut scale_builds: BTreeMap<&'static str, Res<Value>> = BTreeMap::new();
    for &k in systems.iter().filter(|_| want("Scale")) {
        eprintln!(
            "  building the {} scale store of {} events (child process)",
            k.name(),
            scale.scale_events
        );
        let built = scale_run.build(k);
        match &built {
            Ok(v) => eprintln!(
                "  built {} scale store in {:.1} s ({:.0} MiB)",
                k.name(),
                v["seconds"].as_f64().unwrap_or(f64::NAN),
                v["store_bytes"].as_f64().unwrap_or(f64::NAN) / 1048576.0
            ),
            Err(e) => eprintln!("  {} scale store: {e}", k.name()),
        }
        scale_builds.insert(k.name(), built);
    }

    let secs = scale.secs;
    for round in 0..scale.rounds {
        eprintln!(
            "round {} of {} (load {})",
            round + 1,
            scale.rounds,
            machine::loadavg()
        );
        let mut order = systems.clone();
        let n = order.len();
        order.rotate_left(round % n);
        let seed = 0xBE7C4 + round as u64 * 1_000_003;

        eprintln!("  machine limits");
        limits.push(machine::limits(
            &run_dir.join("limits"),
            &scale.limits,
            seed,
        )?);

        // ---- writes on fresh stores: W1, W2
        let mut fresh: BTreeMap<&'static str, Box<dyn System>> = BTreeMap::new();
        for &k in &order {
            let dir = run_dir.join(format!("write-{round}")).join(k.name());
            fresh.insert(k.name(), systems::open(k, &dir, &config)?);
        }
        let guard = |tag: &str, last: u64| Cond::Guard {
            ty: WRITE_TYPE,
            tag: tag.into(),
            after: Some(last),
        };
        for (threads, batch) in [(16, 1), (16, 64), (16, 512), (64, 1), (64, 64), (64, 512)] {
            let id = format!("W1 batch {batch}, {threads} writers");
            if !want(&id) {
                continue;
            }
            for &k in &order {
                let sys = fresh[k.name()].as_ref();
                let prefix = format!("w1-{round}-{threads}-{batch}");
                let head = sys.head()?;
                let fig = write_cell(sys, threads, batch, secs, &prefix, head, None, &guard);
                results.record(
                    &id,
                    "W1",
                    "guarded appends, batch of N events each, events/s",
                    "events/s",
                    true,
                    k,
                    fig,
                );
            }
        }
        for writers in [1, 8, 64, 128] {
            let id = format!("W2 unbatched, {writers} writers");
            if !want(&id) {
                continue;
            }
            for &k in &order {
                let sys = fresh[k.name()].as_ref();
                let prefix = format!("w2-{round}-{writers}");
                let head = sys.head()?;
                let fig = write_cell(sys, writers, 1, secs, &prefix, head, None, &guard);
                results.record(
                    &id,
                    "W2",
                    "guarded single-event appends, events/s (p50/p99 latency in the JSON)",
                    "events/s",
                    true,
                    k,
                    fig.clone(),
                );
                if let Ok(v) = fig {
                    for (name, key) in [("p50", "latency_p50_us"), ("p99", "latency_p99_us")] {
                        let lid = format!("W2 {name} latency, {writers} writers");
                        results.record(
                            &lid,
                            "W2",
                            "append latency",
                            "us",
                            false,
                            k,
                            Ok(json!({"value": v[key]})),
                        );
                    }
                }
            }
        }
        for (_, sys) in std::mem::take(&mut fresh) {
            sys.close()?;
        }
        let _ = fs::remove_dir_all(run_dir.join(format!("write-{round}")));

        // ---- warm reads on the corpora: R1, R2, R4, R5
        for &k in &order {
            machine::warm_dir(&run_dir.join("corpus").join(k.name()));
        }
        let entities = scale.entities;
        let corpus_n = scale.corpus;
        for readers in [16, 64] {
            let id = format!("R1 warm selective, {readers} readers");
            if !want(&id) {
                continue;
            }
            for &k in &order {
                let fig = read_cell(corpus[k.name()].as_ref(), readers, secs, seed, &|s, rng| {
                    s.read(
                        &Q::Tag(format!("entity:{}", rng.below(entities))),
                        0,
                        None,
                        false,
                    )
                });
                results.record(
                    &id,
                    "R1",
                    "one entity's events (about corpus/entities), events/s",
                    "events/s",
                    true,
                    k,
                    fig,
                );
            }
        }
        for (label, grade) in [
            ("full scan", 0u64),
            ("1/10", 10),
            ("1/100", 100),
            ("1/1000", 1000),
        ] {
            let id = format!("R2 warm {label}, 16 readers");
            if !want(&id) {
                continue;
            }
            for &k in &order {
                let fig = read_cell(corpus[k.name()].as_ref(), 16, secs, seed, &|s, rng| {
                    if grade == 0 {
                        full_scan(s)
                    } else {
                        s.read(
                            &Q::Tag(format!("s{grade}:{}", rng.below(grade))),
                            0,
                            None,
                            false,
                        )
                    }
                });
                results.record(
                    &id,
                    "R2",
                    "ordered read of a graded selectivity, events/s",
                    "events/s",
                    true,
                    k,
                    fig,
                );
            }
        }
        for &k in order.iter().filter(|_| want("R4 last event of an entity")) {
            let fig = op_cell(corpus[k.name()].as_ref(), secs, seed, &|s, rng| {
                Ok(s.read(
                    &Q::Tag(format!("entity:{}", rng.below(entities))),
                    0,
                    Some(1),
                    true,
                )?
                .events)
            });
            let desc = format!(
                "newest event of an entity (~{} events), backwards limit 1, reads/s",
                corpus_n / entities
            );
            results.record(
                "R4 last event of an entity",
                "R4",
                &desc,
                "reads/s",
                true,
                k,
                fig,
            );
        }
        for &k in order.iter().filter(|_| want("R4 last event of a 1/10 tag")) {
            let fig = op_cell(corpus[k.name()].as_ref(), secs, seed, &|s, rng| {
                Ok(
                    s.read(&Q::Tag(format!("s10:{}", rng.below(10))), 0, Some(1), true)?
                        .events,
                )
            });
            let desc = format!(
                "newest event of a tag with ~{} events, backwards limit 1, reads/s",
                corpus_n / 10
            );
            results.record(
                "R4 last event of a 1/10 tag",
                "R4",
                &desc,
                "reads/s",
                true,
                k,
                fig,
            );
        }
        // A tag whose events are all recent (in every system's newest data: Lapilli's and
        // Tephra's active segment), written fresh each round, the same count for every system.
        for &k in order
            .iter()
            .filter(|_| want("R4 last event of a recent tag"))
        {
            let sys = corpus[k.name()].as_ref();
            let tag = format!("hot:{round}");
            let mut written = 0u64;
            let fig = (|| -> Res<Value> {
                while written < scale.hot_events {
                    let n = 1000.min(scale.hot_events - written);
                    let evs = (written..written + n)
                        .map(|i| Ev {
                            ty: "Hot",
                            tags: vec![tag.clone()],
                            data: payload(i),
                        })
                        .collect();
                    sys.append(evs, &Cond::None)?
                        .ok_or("unconditional append rejected")?;
                    written += n;
                }
                op_cell(sys, secs, seed, &|s, _rng| {
                    Ok(s.read(&Q::Tag(tag.clone()), 0, Some(1), true)?.events)
                })
            })();
            let desc = format!(
                "newest event of a tag whose {} events were all just appended, backwards limit 1, reads/s",
                scale.hot_events
            );
            results.record(
                "R4 last event of a recent tag",
                "R4",
                &desc,
                "reads/s",
                true,
                k,
                fig,
            );
        }
        for &k in order.iter().filter(|_| want("R4 5-page cursor walk")) {
            let fig = op_cell(corpus[k.name()].as_ref(), secs, seed, &|s, rng| {
                let tag = Q::Tag(format!("s100:{}", rng.below(100)));
                let (mut after, mut n) = (0, 0);
                for _ in 0..5 {
                    let page = s.read(&tag, after, Some(100), false)?;
                    if page.events == 0 {
                        break;
                    }
                    after = page.last;
                    n += page.events;
                }
                Ok(n)
            });
            results.record(
                "R4 5-page cursor walk",
                "R4",
                "5 pages of 100 over a 1/100 tag (after = last position), walks/s",
                "walks/s",
                true,
                k,
                fig,
            );
        }
        for &k in order.iter().filter(|_| want("R5 subscription catch-up")) {
            let sys = corpus[k.name()].as_ref();
            let fig = systems::unsupported(k, "subscribe")
                .map(|e| Err(e.to_string()))
                .unwrap_or_else(|| {
                    let head = sys.head()?;
                    let t = Instant::now();
                    let out = sys.catch_up(&Q::All, head)?;
                    let s = t.elapsed().as_secs_f64();
                    Ok(json!({"value": out.events as f64 / s, "events": out.events, "seconds": s}))
                });
            results.record(
                "R5 subscription catch-up",
                "R5",
                "subscribe to everything from 0 until caught up, events/s",
                "events/s",
                true,
                k,
                fig,
            );
        }
        for &k in order.iter().filter(|_| want("R5 live latency p50")) {
            let sys = corpus[k.name()].as_ref();
            let fig = systems::unsupported(k, "subscribe")
                .map(|e| Err(e.to_string()))
                .unwrap_or_else(|| {
                    let lat =
                        sys.live_latency(&format!("live:{round}"), scale.live_events, EVENT_BYTES)?;
                    let (p50, p99) = machine::p50_p99(lat);
                    Ok(json!({"value": p50, "p99_us": p99, "events": scale.live_events}))
                });
            results.record(
                "R5 live latency p50",
                "R5",
                "append call to delivery on a subscriber (includes the fsync), one event at a time",
                "us",
                false,
                k,
                fig,
            );
        }

        // ---- conditions on the prepopulated store: W3, W4 (16 writers, one event per append)
        let cells: [(&str, &str, &(dyn Fn(&str, u64, u64) -> Cond + Sync)); 5] = [
            (
                "W3 uniqueness guard",
                "guard on a new tag with `after` omitted (the whole log), 16 writers with a fixed count of single-event appends each (corpus_appends), events/s",
                &|tag, _last, _stale| Cond::Guard {
                    ty: WRITE_TYPE,
                    tag: tag.into(),
                    after: None,
                },
            ),
            (
                "W3 existence clause",
                "boundary guard after the head plus an existence clause on a new tag, 16 writers with a fixed count of single-event appends each (corpus_appends), events/s",
                &|tag, last, _stale| Cond::Exists {
                    ty: WRITE_TYPE,
                    tag: tag.into(),
                    after: last,
                    exists_tag: format!("{tag}:x"),
                },
            ),
            (
                "W4 stale cursor (after = head/2)",
                "guard with `after` half the log back, 16 writers with a fixed count of single-event appends each (corpus_appends), events/s",
                &|tag, _last, stale| Cond::Guard {
                    ty: WRITE_TYPE,
                    tag: tag.into(),
                    after: Some(stale),
                },
            ),
            (
                "W4 head-first (after = head)",
                "guard with `after` at the head, 16 writers with a fixed count of single-event appends each (corpus_appends), events/s",
                &|tag, last, _stale| Cond::Guard {
                    ty: WRITE_TYPE,
                    tag: tag.into(),
                    after: Some(last),
                },
            ),
            (
                "W4 stale cursor (after = 1)",
                "guard with `after` = 1 (the whole log back), 16 writers with a fixed count of single-event appends each (corpus_appends), events/s",
                &|tag, _last, _stale| Cond::Guard {
                    ty: WRITE_TYPE,
                    tag: tag.into(),
                    after: Some(1),
                },
            ),
        ];
        let stale_ratio_wanted = want(STALE_COST);
        let mut rates: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        for (ci, (id, desc, mk)) in cells.into_iter().enumerate() {
            let for_ratio = stale_ratio_wanted
                && matches!(id, "W4 head-first (after = head)" | "W4 stale cursor (after = 1)");
            if !want(id) && !for_ratio {
                continue;
            }
            for &k in &order {
                let sys = corpus[k.name()].as_ref();
                let fig = if id.contains("existence") && systems::unsupported(k, "exists").is_some()
                {
                    Err(systems::unsupported(k, "exists").unwrap().to_string())
                } else {
                    let head = sys.head()?;
                    let stale = head / 2;
                    // A prefix of this cell's own: a guard with `after` = 1 on a tag an
                    // earlier cell appended to would be rejected.
                    let prefix = format!("{}-{ci}-{round}", &id[..2]);
                    write_cell(
                        sys,
                        16,
                        1,
                        secs,
                        &prefix,
                        head,
                        Some(scale.corpus_appends),
                        &|tag, last| mk(tag, last, stale),
                    )
                };
                let group = if id.starts_with("W3") { "W3" } else { "W4" };
                if let Ok(v) = &fig {
                    rates.insert((id, k.name()), v["value"].as_f64().unwrap_or(f64::NAN));
                }
                results.record(id, group, desc, "events/s", true, k, fig);
            }
        }
        for &k in order.iter().filter(|_| stale_ratio_wanted) {
            let fig = stale_cost(
                rates.get(&("W4 head-first (after = head)", k.name())),
                rates.get(&("W4 stale cursor (after = 1)", k.name())),
            );
            results.record(
                STALE_COST,
                "W4",
                "time per guarded append with `after` = 1 over one with `after` = the head (the two rows above, same round), x",
                "x",
                false,
                k,
                fig,
            );
        }

        // ---- the skewed corpus: R1, R2, R4, R5, W3, W4 where a tag's size matters
        if want_skewed {
            skewed_round(
                &mut results,
                &skewed,
                &run_dir,
                &order,
                &zipf,
                skew_hot_events,
                &scale,
                round,
                seed,
            )?;
        }

        // ---- startup and cold reads: close, read through (`machine::read_through`), evict,
        // reopen (timed), R3
        for &k in order.iter().filter(|_| want("Startup") || want("R3 cold")) {
            let dir = run_dir.join("corpus").join(k.name());
            corpus.remove(k.name()).unwrap().close()?;
            let (through_bytes, through_s) =
                machine::read_through(&dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
            machine::evict_dir(&dir).map_err(|e| format!("evict {}: {e}", dir.display()))?;
            let resident = machine::files(&dir)
                .iter()
                .map(|f| {
                    fs::metadata(f).map(|m| m.len()).unwrap_or(0) as f64
                        * machine::resident_fraction(f)
                })
                .sum::<f64>();
            let rss0 = machine::rss();
            let t = Instant::now();
            let opened = systems::open(k, &dir, &config);
            let open_s = t.elapsed().as_secs_f64();
            let sys = opened?;
            let head = sys.head()?;
            let rss1 = machine::rss();
            let resident_after = machine::files(&dir)
                .iter()
                .map(|f| {
                    fs::metadata(f).map(|m| m.len()).unwrap_or(0) as f64
                        * machine::resident_fraction(f)
                })
                .sum::<f64>();
            let fig = Ok(with_read_through(
                json!({
                    "value": open_s * 1e3,
                    "head": head,
                    "store_bytes": machine::dir_bytes(&dir),
                    "rss_growth_bytes": rss1.saturating_sub(rss0),
                    "resident_bytes_before_open": resident,
                    "resident_bytes_after_open": resident_after,
                }),
                through_bytes,
                through_s,
            ));
            results.record(
                "Startup open time (cold cache)",
                "Startup",
                "open after a clean close, store files evicted, ms",
                "ms",
                false,
                k,
                fig,
            );
            results.record(
                "Startup RSS growth",
                "Startup",
                "growth of this process's resident memory across the open, MiB",
                "MiB",
                false,
                k,
                Ok(json!({"value": rss1.saturating_sub(rss0) as f64 / 1048576.0})),
            );
            // R3: distinct entities, read once each, after evicting the store's pages again
            // now that it is open, so nothing its open read is still cached.
            let fig = cold_read_after_open(sys.as_ref(), &dir, scale.cold_entities, entities, seed)
                .map(|fig| with_read_through(fig, through_bytes, through_s));
            results.record("R3 cold selective, 16 readers", "R3", "distinct entities read once each after a cold reopen and a second eviction of the open store's pages (mappings included), events/s", "events/s", true, k, fig);
            corpus.insert(k.name(), sys);
        }
        for &k in order.iter().filter(|_| want("R3 cold selective, 1 KiB")) {
            let dir = run_dir.join("corpus-1k").join(k.name());
            corpus_1k.remove(k.name()).unwrap().close()?;
            let (through_bytes, through_s) =
                machine::read_through(&dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
            machine::evict_dir(&dir).map_err(|e| format!("evict {}: {e}", dir.display()))?;
            let sys = systems::open(k, &dir, &config)?;
            let fig = cold_read_after_open(
                sys.as_ref(),
                &dir,
                scale.cold_entities,
                entities_1k,
                seed,
            )
            .map(|fig| with_read_through(fig, through_bytes, through_s));
            results.record(
                "R3 cold selective, 1 KiB events, 16 readers",
                "R3",
                "the same on a corpus of 1 KiB events (corpus_1k in the JSON, ~100 events an entity), events/s",
                "events/s",
                true,
                k,
                fig,
            );
            corpus_1k.insert(k.name(), sys);
        }

        // ---- the scale cells: one fresh child process per system and round
        for &k in order.iter().filter(|_| want("Scale")) {
            eprintln!("  scale cells, {} (child process)", k.name());
            scale_run.measure(k, &scale_builds[k.name()], &mut results);
        }
    }
    // Writer memory: once per run, each system in a fresh child on a store of its own.
    for &k in systems.iter().filter(|_| want("Writer memory")) {
        eprintln!(
            "  writer memory, {}: {} events (child process)",
            k.name(),
            scale.writer_events
        );
        scale_run.writer_memory(k, &mut results);
    }
    for (_, sys) in corpus.into_iter().chain(corpus_1k).chain(skewed) {
        sys.close()?;
    }
    let load_end = machine::loadavg();
    let total = started.elapsed().as_secs_f64();
    eprintln!("done in {total:.0} s (load {load_end})");

    let date = machine::sh("date -u +%Y-%m-%d");
    let run = json!({
        "date_utc": machine::sh("date -u +%Y-%m-%dT%H:%M:%SZ"),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "scale": scale.name,
        "rounds": scale.rounds,
        "corpus_events": scale.corpus,
        "corpus_1k_events": scale.corpus_1k,
        "corpus_appends": scale.corpus_appends,
        "entities": scale.entities,
        "event_bytes": EVENT_BYTES,
        "window_seconds": scale.secs,
        "segment_size_bytes": scale.segment_size,
        "systems": systems.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "duration_seconds": total,
        "corpus_build": build,
        "skewed_corpus": {
            "events": scale.corpus,
            "entities": zipf.entities(),
            "zipf_exponent": zipf.exponent,
            "hot_entity_events": skew_hot_events,
            "build": build_skewed,
        },
        "scale": {
            "events": scale.scale_events,
            "writer_events": scale.writer_events,
            "segment_size_bytes": scale_run.segment_size,
            "build": scale_builds.iter().map(|(k, v)| (k.to_string(), v.clone().unwrap_or_else(|e| json!({"error": e})))).collect::<serde_json::Map<_, _>>(),
            "process": "each system in a fresh child process (lapilli-bench scale-child): build once per run, measure once per round, writer memory once per run",
        },
        "eviction": "store closed: posix_fadvise(POSIX_FADV_DONTNEED) on every file of the store (after fdatasync); store open (R3, scale cold reads): first madvise(MADV_DONTNEED) on this process's shared or read-only mappings of the store's files (from /proc/self/maps), then the same fadvise; mincore residency recorded in each figure",
        "interleaving": "per cell, every system in turn; the order rotates each round",
        "umadb_writer": format!("writer_thread_blocking, append_batch_max_events = {} (its server's value)", systems::UMADB_APPEND_BATCH_MAX_EVENTS),
        "tephra_config": "SegmentSet + WriteCoordinator, WriterConfig::default()",
    });
    let versions = json!({
        "lapilli": format!("lapilli-core {} (git {})", env!("CARGO_PKG_VERSION"), machine::sh(&format!("git -C {} rev-parse --short HEAD", root.display()))),
        "tephra": "0.4.1",
        "umadb-core": "0.7.8",
    });
    let doc = report::document(run, machine::facts(&data), versions, limits, &results);
    fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let stem = format!("{}-{date}", scale.name);
    let json_path = args.out.join(format!("{stem}.json"));
    let md_path = args.out.join(format!("{stem}.md"));
    fs::write(&json_path, serde_json::to_string_pretty(&doc).unwrap())
        .map_err(|e| e.to_string())?;
    fs::write(&md_path, report::markdown(&doc)).map_err(|e| e.to_string())?;
    eprintln!("wrote {} and {}", json_path.display(), md_path.display());
    let _ = fs::remove_dir_all(&run_dir);
    Ok(())
}
