//! `holdfast monitor snapshot`: the Grafana dashboards' panels drawn from a real
//! Prometheus's data (its range-query API) into a static HTML page of SVG charts, then a PNG
//! of that page from headless Chromium. Grafana cannot be installed here; this is the same
//! panels, the same queries, a picture a person can look at.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cli::MonitorSnapshotArguments;
use crate::failure::Failure;
use crate::loopback_http;

/// The dashboards, as monitoring/grafana/generate.py wrote them.
const DASHBOARDS: [&str; 3] = [
    include_str!("../../../../monitoring/grafana/dashboards/overview.json"),
    include_str!("../../../../monitoring/grafana/dashboards/store.json"),
    include_str!("../../../../monitoring/grafana/dashboards/pair.json"),
];

/// Points per series: enough for a 560-pixel chart.
const POINTS_PER_SERIES: u64 = 240;
const CHART_WIDTH: f64 = 560.0;
const CHART_HEIGHT: f64 = 180.0;
const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf"];
/// The headless browsers tried, in order (Debian: `chromium-headless-shell`, `chromium`).
const BROWSERS: [&str; 3] = ["chromium-headless-shell", "chromium", "google-chrome"];

/// One series of a panel: its legend and (unix seconds, value) points.
struct Series {
    legend: String,
    points: Vec<(f64, f64)>,
}

pub fn run(arguments: &MonitorSnapshotArguments, default_prometheus_url: Option<String>) -> Result<ExitCode, Failure> {
    let url = match (&arguments.prometheus_url, default_prometheus_url) {
        (Some(url), _) => url.clone(),
        (None, Some(url)) => url,
        (None, None) => {
            return Err(Failure::input("no Prometheus: run `holdfast monitor up` first or give --prometheus-url"));
        }
    };
    let port = url
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.trim_end_matches('/').parse::<u16>().ok())
        .ok_or_else(|| Failure::input(format!("--prometheus-url must be http://127.0.0.1:PORT, not {url:?}")))?;
    if arguments.minutes == 0 {
        return Err(Failure::input("--minutes must be at least 1"));
    }
    let end = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    let start = end - 60.0 * arguments.minutes as f64;
    let step = ((end - start) / POINTS_PER_SERIES as f64).max(1.0);

    let mut html = String::from(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Holdfast monitoring snapshot</title><style>\
         body{font-family:sans-serif;background:#111217;color:#ccccdc;margin:12px}\
         h1{font-size:20px}h2{font-size:17px;margin:18px 0 6px}\
         .grid{display:grid;grid-template-columns:repeat(2,600px);gap:10px}\
         .panel{background:#181b1f;border:1px solid #2c3235;padding:8px}\
         .panel h3{font-size:13px;margin:0 0 4px}.legend{font-size:11px}.nodata{color:#888;font-size:12px}\
         </style></head><body>",
    );
    let _ = write!(
        html,
        "<h1>Holdfast monitoring snapshot</h1><p>{url}, the last {} min, every {step:.0} s</p>",
        arguments.minutes
    );
    let (mut panels, mut with_data) = (0, 0);
    for text in DASHBOARDS {
        let board: serde_json::Value =
            serde_json::from_str(text).map_err(|error| Failure::other(format!("a built-in dashboard is not JSON: {error}")))?;
        let _ = write!(html, "<h2>{}</h2><div class=\"grid\">", escape(board["title"].as_str().unwrap_or("")));
        for panel in board["panels"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let title = panel["title"].as_str().unwrap_or("");
            let unit = panel["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("short");
            let mut series = Vec::new();
            for target in panel["targets"].as_array().map(Vec::as_slice).unwrap_or_default() {
                // Every VM and every pair: the dashboards' variables at "All".
                let expr = target["expr"].as_str().unwrap_or("").replace("$vm", ".*").replace("$pair", ".*").replace("$__rate_interval", "1m");
                let legend = target["legendFormat"].as_str().unwrap_or("");
                series.extend(query_range(port, &expr, legend, start, end, step)?);
            }
            panels += 1;
            let points: usize = series.iter().map(|one| one.points.len()).sum();
            if points > 0 {
                with_data += 1;
            }
            let _ = write!(
                html,
                "<div class=\"panel\" data-title=\"{}\" data-series=\"{}\" data-points=\"{points}\"><h3>{}</h3>{}</div>",
                escape(title),
                series.len(),
                escape(title),
                chart(&series, unit, start, end)
            );
        }
        html.push_str("</div>");
    }
    html.push_str("</body></html>\n");

    let html_path = arguments.out.with_extension("html");
    std::fs::write(&html_path, &html)
        .map_err(|error| Failure::other(format!("cannot write '{}': {error}", html_path.display())))?;
    screenshot(&html_path, &arguments.out)?;
    println!(
        "holdfast: {} ({panels} panels, {with_data} with data; the page: {})",
        arguments.out.display(),
        html_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A range query's series, each named by filling `{{label}}` in `legend`.
fn query_range(port: u16, expr: &str, legend: &str, start: f64, end: f64, step: f64) -> Result<Vec<Series>, Failure> {
    let path = format!("/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step:.3}", loopback_http::percent_encode(expr));
    let (_, body) = loopback_http::get(port, &path, Duration::from_secs(30))
        .map_err(|error| Failure::other(format!("Prometheus at 127.0.0.1:{port}: {error}")))?;
    let reply: serde_json::Value = serde_json::from_str(&body)
        .map_err(|error| Failure::other(format!("Prometheus's answer to {expr:?} is not JSON: {error}")))?;
    if reply["status"] != "success" {
        return Err(Failure::other(format!("Prometheus refused {expr:?}: {}", reply["error"])));
    }
    let mut all = Vec::new();
    for result in reply["data"]["result"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let mut name = legend.to_owned();
        if let Some(labels) = result["metric"].as_object() {
            for (key, value) in labels {
                name = name.replace(&format!("{{{{{key}}}}}"), value.as_str().unwrap_or(""));
            }
        }
        let points = result["values"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|pair| Some((pair[0].as_f64()?, pair[1].as_str()?.parse::<f64>().ok()?)))
            .filter(|(_, value)| value.is_finite())
            .collect();
        all.push(Series { legend: name, points });
    }
    Ok(all)
}

/// An SVG line chart of `series` over [start, end], the value axis from 0 (or the lowest
/// value, if below) to the highest, labelled in `unit`.
fn chart(series: &[Series], unit: &str, start: f64, end: f64) -> String {
    let values = series.iter().flat_map(|one| one.points.iter().map(|&(_, value)| value));
    let (low, high) = values.fold((0.0f64, f64::NEG_INFINITY), |(low, high), value| (low.min(value), high.max(value)));
    if !high.is_finite() {
        return "<p class=\"nodata\">no data</p>".to_owned();
    }
    let high = if high > low { high } else { low + 1.0 };
    let (left, bottom) = (70.0, CHART_HEIGHT - 18.0);
    let x = |time: f64| left + (time - start) / (end - start) * (CHART_WIDTH - left - 4.0);
    let y = |value: f64| bottom - (value - low) / (high - low) * (bottom - 6.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{CHART_WIDTH}\" height=\"{CHART_HEIGHT}\" font-size=\"10\" fill=\"#aaa\">\
         <line x1=\"{left}\" y1=\"6\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"#444\"/>\
         <line x1=\"{left}\" y1=\"{bottom}\" x2=\"{}\" y2=\"{bottom}\" stroke=\"#444\"/>\
         <text x=\"2\" y=\"12\">{}</text><text x=\"2\" y=\"{bottom}\">{}</text>\
         <text x=\"{left}\" y=\"{}\">-{:.0} min</text><text x=\"{}\" y=\"{}\">now</text>",
        CHART_WIDTH - 4.0,
        format_value(high, unit),
        format_value(low, unit),
        CHART_HEIGHT - 4.0,
        (end - start) / 60.0,
        CHART_WIDTH - 30.0,
        CHART_HEIGHT - 4.0,
    );
    for (index, one) in series.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let mut points = String::new();
        for &(time, value) in &one.points {
            let _ = write!(points, "{:.1},{:.1} ", x(time), y(value));
        }
        let _ = write!(svg, "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{points}\"/>");
    }
    svg.push_str("</svg><div class=\"legend\">");
    for (index, one) in series.iter().enumerate() {
        let last = one.points.last().map_or(String::new(), |&(_, value)| format_value(value, unit));
        let _ = write!(
            svg,
            "<span style=\"color:{}\">&#9632;</span> {} {last} &nbsp; ",
            COLOURS[index % COLOURS.len()],
            escape(&one.legend)
        );
    }
    svg.push_str("</div>");
    svg
}

/// A value in a Grafana unit, short.
fn format_value(value: f64, unit: &str) -> String {
    let scaled = |value: f64| {
        let magnitude = value.abs();
        if magnitude >= 1e9 {
            format!("{:.2} G", value / 1e9)
        } else if magnitude >= 1e6 {
            format!("{:.2} M", value / 1e6)
        } else if magnitude >= 1e3 {
            format!("{:.2} k", value / 1e3)
        } else {
            format!("{value:.3}")
        }
    };
    match unit {
        "s" if value.abs() < 1.0 => format!("{:.2} ms", value * 1e3),
        "s" => format!("{value:.2} s"),
        "percentunit" => format!("{:.1} %", value * 100.0),
        "Bps" => format!("{}B/s", scaled(value)),
        "bytes" => format!("{}B", scaled(value)),
        "reqps" => format!("{}/s", scaled(value)),
        "ops" => format!("{}/s", scaled(value)),
        _ => scaled(value),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}


/// A PNG of the page at `html` from headless Chromium (`--no-sandbox`: CI runs as root),
/// as tall as the three dashboards.
fn screenshot(html: &Path, png: &Path) -> Result<(), Failure> {
    let html = std::fs::canonicalize(html)?;
    let png_absolute = std::env::current_dir()?.join(png);
    let _ = std::fs::remove_file(&png_absolute);
    for browser in BROWSERS {
        let output = Command::new(browser)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1260,2750"])
            .arg(format!("--screenshot={}", png_absolute.display()))
            .arg(format!("file://{}", html.display()))
            .stdin(Stdio::null())
            .output();
        match output {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(Failure::other(format!("cannot run {browser}: {error}"))),
            Ok(output) if png_absolute.exists() => {
                let _ = output;
                return Ok(());
            }
            Ok(output) => {
                return Err(Failure::other(format!(
                    "{browser} wrote no screenshot ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim_end()
                )));
            }
        }
    }
    Err(Failure::other(format!(
        "no headless browser found (tried {}): install Debian's chromium-headless-shell",
        BROWSERS.join(", ")
    )))
}
