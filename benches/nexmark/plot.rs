//! The benchmark's SVG plots: grouped bars per query (pure-Rust SVG, text left to the
//! viewer). Bar heights are labelled with their values so a reader can read the verdict off
//! the picture.

use std::path::Path;

use plotters::prelude::*;

use crate::Row;

const COLORS: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
];

type Res = Result<(), Box<dyn std::error::Error>>;

struct Bars<'a> {
    title: String,
    y_desc: &'a str,
    log: bool,
    series: Vec<(String, Vec<f64>)>,
    label: &'a dyn Fn(f64) -> String,
    /// A horizontal line (a target), with its label.
    line: Option<(f64, String)>,
    legend: SeriesLabelPosition,
}

fn draw(path: &Path, queries: &[String], b: &Bars<'_>) -> Res {
    let root = SVGBackend::new(path, (1100, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = queries.len() as f64;
    let values = b.series.iter().flat_map(|(_, v)| v.iter().copied()).filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let hi = hi.max(b.line.as_ref().map_or(0.0, |l| l.0)).max(1e-9);
    let k = b.series.len() as f64;
    let width = 0.8 / k;
    let mut builder = ChartBuilder::on(&root);
    let chart =
        builder.caption(&b.title, ("sans-serif", 17)).margin(14).x_label_area_size(30).y_label_area_size(80);
    let x = -0.5..n - 0.5;
    let qs = queries.to_vec();
    let xfmt = move |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 {
            qs.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    macro_rules! body {
        ($chart:expr, $base:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(queries.len() * 2 + 1)
                .x_label_formatter(&xfmt)
                .y_desc(b.y_desc)
                .y_label_formatter(&|v| (b.label)(*v))
                .draw()?;
            for (s, (name, vals)) in b.series.iter().enumerate() {
                let color = COLORS[s % COLORS.len()];
                let off = -0.4 + width * s as f64;
                chart
                    .draw_series(vals.iter().enumerate().filter(|(_, v)| v.is_finite() && **v > 0.0).map(
                        |(i, v)| {
                            let x0 = i as f64 + off;
                            Rectangle::new([(x0, $base), (x0 + width * 0.9, *v)], color.filled())
                        },
                    ))?
                    .label(name.as_str())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
                chart.draw_series(
                    vals.iter().enumerate().filter(|(_, v)| v.is_finite() && **v > 0.0).map(|(i, v)| {
                        let x0 = i as f64 + off + width * 0.45;
                        Text::new(
                            (b.label)(*v),
                            (x0, *v),
                            ("sans-serif", 9).into_font().color(&BLACK).pos(
                                plotters::style::text_anchor::Pos::new(
                                    plotters::style::text_anchor::HPos::Center,
                                    plotters::style::text_anchor::VPos::Bottom,
                                ),
                            ),
                        )
                    }),
                )?;
            }
            if let Some((y, label)) = &b.line {
                chart
                    .draw_series(LineSeries::new(vec![(-0.5, *y), (n - 0.5, *y)], BLACK.stroke_width(1)))?
                    .label(label.as_str())
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], BLACK.stroke_width(1)));
            }
            chart
                .configure_series_labels()
                .position(b.legend.clone())
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .label_font(("sans-serif", 11))
                .draw()?;
        }};
    }
    if b.log {
        let lo = if lo.is_finite() { lo / 3.0 } else { 0.1 };
        let chart = chart.build_cartesian_2d(x, (lo..hi * 4.0).log_scale())?;
        body!(chart, lo);
    } else {
        let chart = chart.build_cartesian_2d(x, 0.0..hi * 1.25)?;
        body!(chart, 0.0);
    }
    root.present()?;
    Ok(())
}

fn rate(v: f64) -> String {
    if v >= 1e6 { format!("{:.1}M", v / 1e6) } else { format!("{:.0}k", v / 1e3) }
}

fn bytes(v: f64) -> String {
    crate::fmt_bytes(v)
}

fn ms(v: f64) -> String {
    if v >= 10.0 { format!("{v:.0} ms") } else { format!("{v:.1} ms") }
}

/// Writes every plot into `dir`; returns each file's name and outcome.
pub fn all(dir: &Path, intervals: &[u64], rows: &[Row]) -> Vec<(String, std::io::Result<()>)> {
    let queries: Vec<String> = rows.iter().map(|r| r.query.clone()).collect();
    let mut series = vec![(
        "checkpointing off".to_string(),
        rows.iter().map(|r| r.throughput.get(&None).copied().unwrap_or(f64::NAN)).collect(),
    )];
    for i in intervals {
        series.push((
            format!("every {i} ms"),
            rows.iter().map(|r| r.throughput.get(&Some(*i)).copied().unwrap_or(f64::NAN)).collect(),
        ));
    }
    let short = intervals.iter().min().copied().unwrap_or(0);
    let plots = [
        (
            "nexmark-throughput.svg",
            Bars {
                title: "Nexmark on floe: events per second (exactly-once, incremental checkpoints)".into(),
                y_desc: "events/s",
                log: false,
                series,
                label: &rate,
                line: None,
                legend: SeriesLabelPosition::UpperRight,
            },
        ),
        (
            "nexmark-checkpoints.svg",
            Bars {
                title: format!("checkpoint duration every {short} ms (trigger to complete)"),
                y_desc: "ms",
                log: true,
                series: vec![
                    ("p50".into(), rows.iter().map(|r| r.duration_p50_ms).collect()),
                    ("p99".into(), rows.iter().map(|r| r.duration_p99_ms).collect()),
                ],
                label: &ms,
                line: Some((50.0, "target p99 50 ms".into())),
                legend: SeriesLabelPosition::UpperRight,
            },
        ),
        (
            "nexmark-bytes.svg",
            Bars {
                title: format!("state and checkpoint bytes (every {short} ms)"),
                y_desc: "bytes",
                log: true,
                series: vec![
                    (
                        "live state (keys + values)".into(),
                        rows.iter().map(|r| r.state_bytes as f64).collect(),
                    ),
                    ("full checkpoint".into(), rows.iter().map(|r| r.full_bytes).collect()),
                    ("increment per checkpoint".into(), rows.iter().map(|r| r.incr_bytes).collect()),
                    (
                        "retained on disk".into(),
                        rows.iter().map(|r| r.footprint.map_or(f64::NAN, |f| f.0 as f64)).collect(),
                    ),
                ],
                label: &bytes,
                line: None,
                // The stateless queries on the left have no bars.
                legend: SeriesLabelPosition::UpperLeft,
            },
        ),
    ];
    plots
        .iter()
        .map(|(name, b)| {
            let r = draw(&dir.join(name), &queries, b).map_err(|e| std::io::Error::other(e.to_string()));
            (name.to_string(), r)
        })
        .collect()
}
