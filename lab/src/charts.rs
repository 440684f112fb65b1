//! The pictures beside each benchmark's Markdown: line charts (a value
//! against history size, writers, time or k, one line per series) and
//! grouped bar charts, as SVG.
//!
//! Log axes are drawn as linear axes over log10 of the values, labelled
//! with the values themselves: one chart type serves both.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use plotters::{
    coord::Shift,
    prelude::*,
    style::{FontDesc, FontFamily, FontStyle},
};

const SIZE: (u32, u32) = (860, 520);

/// A legend row's height, below the plot.
const LEGEND_ROW: u32 = 18;

/// Distinct colours, in order of use; past ten series the colours repeat
/// with another marker ([`Marker`]), so no two lines look alike.
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed: a reference (raw PostgreSQL, an aim) beside memd.
    pub reference: bool,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            reference: false,
        }
    }
}

/// `(series name, x, y)` points as series, in the order names first come;
/// names for which `reference` holds are drawn dashed.
pub fn grouped(
    points: impl IntoIterator<Item = (String, f64, f64)>,
    reference: impl Fn(&str) -> bool,
) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for (name, x, y) in points {
        match series.iter_mut().find(|s| s.name == name) {
            Some(found) => found.points.push((x, y)),
            None => {
                let mut new = Series::new(name, vec![(x, y)]);
                new.reference = reference(&new.name);
                series.push(new);
            }
        }
    }
    series
}

/// An axis: its label (with its unit) and whether it is logarithmic.
#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    pub log: bool,
    /// A share, from 0 to 1: drawn over exactly that range.
    pub share: bool,
}

impl Axis {
    pub fn linear(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            log: false,
            share: false,
        }
    }

    pub fn log(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            log: true,
            share: false,
        }
    }

    /// A linear axis of a share (recall, a ratio of 0 to 1).
    pub fn share(label: impl Into<String>) -> Self {
        Self {
            share: true,
            ..Self::linear(label)
        }
    }

    fn to_plot(&self, value: f64) -> f64 {
        if self.log {
            value.max(1e-9).log10()
        } else {
            value
        }
    }

    fn label_of(&self, plotted: f64) -> String {
        let value = if self.log {
            10f64.powf(plotted)
        } else {
            plotted
        };
        number(value)
    }

    /// How many labels to ask for: on a log axis one a decade (plotters
    /// then picks whole powers of ten), else eight.
    fn labels(&self, range: &std::ops::Range<f64>) -> usize {
        if self.log {
            ((range.end - range.start).ceil() as usize + 1).clamp(3, 10)
        } else {
            8
        }
    }

    /// The plotted range covering `values`, with some room, and `headroom`
    /// (a share of the span) more at the top.
    fn range(&self, values: impl Iterator<Item = f64>, headroom: f64) -> std::ops::Range<f64> {
        let plotted: Vec<f64> = values.map(|v| self.to_plot(v)).collect();
        let (mut low, mut high) = plotted
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
                (l.min(*v), h.max(*v))
            });
        if !low.is_finite() {
            (low, high) = (0.0, 1.0);
        }
        if !self.log {
            low = low.min(0.0);
        }
        let span = (high - low).max(if self.log { 0.5 } else { 1e-9 });
        let pad = span * 0.08;
        let low = if self.log || low < 0.0 {
            low - pad
        } else {
            low
        };
        low..high + pad + span * headroom
    }
}

/// A short, readable number: 0.5, 12, 1.2k, 3.4M.
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1e6 {
        format!("{:.1}M", value / 1e6).replace(".0M", "M")
    } else if magnitude >= 1e4 {
        format!("{:.0}k", value / 1e3)
    } else if magnitude >= 1e3 {
        format!("{:.1}k", value / 1e3).replace(".0k", "k")
    } else if magnitude >= 10.0 || value == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 1.0 {
        format!("{value:.1}").replace(".0", "")
    } else {
        format!("{value:.2}")
    }
}

/// Where the chart for `out` (a benchmark's Markdown) goes: the same path
/// with `-suffix.svg` (or `.svg` for no suffix).
pub fn path_beside(out: &Path, suffix: &str) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bench".into());
    let name = if suffix.is_empty() {
        format!("{stem}.svg")
    } else {
        format!("{stem}-{suffix}.svg")
    };
    out.with_file_name(name)
}

fn make_parent(path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    Ok(())
}

fn font(size: f64) -> FontDesc<'static> {
    FontDesc::new(FontFamily::SansSerif, size, FontStyle::Normal)
}

fn draw_err<E: std::fmt::Debug>(err: E) -> anyhow::Error {
    anyhow!("drawing the chart: {err:?}")
}

/// A line chart of `series`, with a legend; when every point has the same
/// x (one history size measured), bars of each series' value instead.
pub fn lines(
    path: &Path,
    title: &str,
    x: &Axis,
    y: &Axis,
    series: &[Series],
) -> anyhow::Result<()> {
    let mut xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    if let Some(first) = xs.next()
        && xs.all(|x| x == first)
    {
        // The title's note on line styles, if any, says nothing of bars.
        let title = title.split(" (").next().unwrap_or(title);
        return bars(
            path,
            &format!("{title}: {} {}", number(first), x.label),
            &y.label,
            &series.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
            &[(
                y.label.clone(),
                series
                    .iter()
                    .map(|s| s.points.first().map_or(0.0, |p| p.1))
                    .collect(),
            )],
        );
    }
    make_parent(path)?;
    // The legend goes below the plot, a row per series: inside it, it
    // would hide lines wherever it was put.
    let legend_height = 12 + LEGEND_ROW * series.len() as u32;
    let root = SVGBackend::new(path, (SIZE.0, SIZE.1 + legend_height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let (plot, legend) = root.split_vertically(SIZE.1);
    draw_lines(&plot, title, x, y, series)?;
    draw_legend(&legend, series)?;
    root.present().map_err(draw_err)?;
    Ok(())
}

/// How a series' points are marked: with its colour, told apart from the
/// series ten before and after it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Marker {
    Circle,
    Triangle,
    Cross,
}

/// The colour and marker of the `index`th series.
fn look(index: usize) -> (RGBColor, Marker) {
    let marker = match (index / COLOURS.len()) % 3 {
        0 => Marker::Circle,
        1 => Marker::Triangle,
        _ => Marker::Cross,
    };
    (COLOURS[index % COLOURS.len()], marker)
}

fn marker_at<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    colour: RGBColor,
    marker: Marker,
) -> anyhow::Result<()> {
    let filled = ShapeStyle::from(&colour).filled();
    let line = ShapeStyle::from(&colour).stroke_width(2);
    match marker {
        Marker::Circle => area.draw(&Circle::new(at, 3, filled)),
        Marker::Triangle => area.draw(&TriangleMarker::new(at, 5, filled)),
        Marker::Cross => area.draw(&Cross::new(at, 4, line)),
    }
    .map_err(draw_err)
}

/// A row per series: a sample of its line (dashed for a reference), its
/// marker and its name.
fn draw_legend(area: &DrawingArea<SVGBackend<'_>, Shift>, series: &[Series]) -> anyhow::Result<()> {
    let left = 88;
    for (index, line) in series.iter().enumerate() {
        let (colour, marker) = look(index);
        let style = ShapeStyle::from(&colour).stroke_width(2);
        let y = 6 + (index as i32) * LEGEND_ROW as i32 + LEGEND_ROW as i32 / 2;
        let segments: &[(i32, i32)] = if line.reference {
            &[(0, 8), (13, 21), (26, 34)]
        } else {
            &[(0, 34)]
        };
        for (from, to) in segments {
            area.draw(&PathElement::new(
                vec![(left + from, y), (left + to, y)],
                style,
            ))
            .map_err(draw_err)?;
        }
        marker_at(area, (left + 17, y), colour, marker)?;
        area.draw(&Text::new(
            line.name.clone(),
            (left + 44, y - 7),
            font(13.0),
        ))
        .map_err(draw_err)?;
    }
    Ok(())
}

fn draw_lines(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    x: &Axis,
    y: &Axis,
    series: &[Series],
) -> anyhow::Result<()> {
    let points = || series.iter().flat_map(|s| s.points.iter());
    let x_range = x.range(points().map(|p| p.0), 0.0);
    let y_range = if y.share {
        0.0..1.02
    } else {
        y.range(points().map(|p| p.1), 0.1)
    };
    let (x_labels, y_labels) = (x.labels(&x_range), y.labels(&y_range));
    let mut chart = ChartBuilder::on(root)
        .caption(title, font(20.0))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x_range, y_range)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(x.label.as_str())
        .y_desc(y.label.as_str())
        .x_label_formatter(&|v| x.label_of(*v))
        .y_label_formatter(&|v| y.label_of(*v))
        .x_labels(x_labels)
        .y_labels(y_labels)
        .label_style(font(13.0))
        .axis_desc_style(font(15.0))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_err)?;
    for (index, line) in series.iter().enumerate() {
        let (colour, marker) = look(index);
        let style = ShapeStyle::from(&colour).stroke_width(2);
        let plotted: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|(a, b)| (x.to_plot(*a), y.to_plot(*b)))
            .collect();
        if line.reference {
            chart
                .draw_series(DashedLineSeries::new(plotted.clone(), 8, 5, style))
                .map_err(draw_err)?;
        } else {
            chart
                .draw_series(LineSeries::new(plotted.clone(), style))
                .map_err(draw_err)?;
        }
        let (filled, thin) = (
            ShapeStyle::from(&colour).filled(),
            ShapeStyle::from(&colour).stroke_width(2),
        );
        let at = plotted.iter().copied();
        match marker {
            Marker::Circle => chart.draw_series(at.map(|p| Circle::new(p, 3, filled))),
            Marker::Triangle => chart.draw_series(at.map(|p| TriangleMarker::new(p, 5, filled))),
            Marker::Cross => chart.draw_series(at.map(|p| Cross::new(p, 4, thin))),
        }
        .map_err(draw_err)?;
    }
    Ok(())
}

/// A grouped bar chart, bars running right: for each category (a row,
/// named on the left), one bar per series, labelled with its value; a
/// legend of the series.
pub fn bars(
    path: &Path,
    title: &str,
    value_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> anyhow::Result<()> {
    make_parent(path)?;
    let rows = categories.len().max(1);
    let per_row = series.len().max(1);
    // Taller for many bars, so that each stays readable.
    let height = (120 + rows * per_row * 22 + rows * 14).max(SIZE.1 as usize / 2) as u32;
    let root = SVGBackend::new(path, (SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let highest = series
        .iter()
        .flat_map(|(_, values)| values.iter().copied())
        .fold(0.0_f64, f64::max);
    let longest = categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(4);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, font(20.0))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size((longest as u32 * 7 + 16).clamp(60, 420))
        // Room on the right for the value labels and the legend.
        .build_cartesian_2d(0.0..(highest * 1.3).max(1e-9), 0.0..rows as f64)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows * 2 + 1)
        .y_label_formatter(&|v| {
            // A category's name beside the middle of its row (the first
            // category at the top).
            let index = v.floor() as usize;
            if (v - v.floor() - 0.5).abs() < 1e-6 && index < rows {
                categories[rows - 1 - index].clone()
            } else {
                String::new()
            }
        })
        .x_desc(value_label)
        .x_label_formatter(&|v| number(*v))
        .label_style(font(13.0))
        .axis_desc_style(font(15.0))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_err)?;
    let thickness = 0.8 / per_row as f64;
    // The first series on top within each row.
    let top_of =
        |row: usize, index: usize| (rows - 1 - row) as f64 + 0.9 - index as f64 * thickness;
    for (index, (name, values)) in series.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        chart
            .draw_series(values.iter().enumerate().map(|(row, value)| {
                let top = top_of(row, index);
                Rectangle::new(
                    [(0.0, top), (*value, top - thickness * 0.9)],
                    colour.filled(),
                )
            }))
            .map_err(draw_err)?
            .label(name.as_str())
            .legend(move |(lx, ly)| {
                Rectangle::new([(lx, ly - 5), (lx + 14, ly + 5)], colour.filled())
            });
        chart
            .draw_series(values.iter().enumerate().map(|(row, value)| {
                let middle = top_of(row, index) - thickness * 0.45;
                Text::new(
                    number(*value),
                    (*value + highest * 0.01, middle),
                    font(12.0)
                        .color(&BLACK)
                        .pos(plotters::style::text_anchor::Pos::new(
                            plotters::style::text_anchor::HPos::Left,
                            plotters::style::text_anchor::VPos::Center,
                        )),
                )
            }))
            .map_err(draw_err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .label_font(font(13.0))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(draw_err)?;
    root.present().map_err(draw_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_short() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(number(1.0), "1", "a log axis' first decade, beside 10");
        assert_eq!(number(849.0), "849");
        assert_eq!(number(1_500.0), "1.5k");
        assert_eq!(number(22_751.0), "23k");
        assert_eq!(number(1_000_000.0), "1M");
    }

    #[test]
    fn thirty_series_look_different() {
        let looks: Vec<(RGBColor, Marker)> = (0..30).map(look).collect();
        for (i, a) in looks.iter().enumerate() {
            for b in &looks[i + 1..] {
                assert!(a != b, "{a:?}");
            }
        }
    }

    #[test]
    fn charts_are_svg_with_their_titles_labels_and_series() {
        let dir = std::env::temp_dir();
        let line = dir.join(format!("memd-chart-{}.svg", std::process::id()));
        lines(
            &line,
            "Appends",
            &Axis::log("writers"),
            &Axis::log("events/s"),
            &[
                Series::new("memd", vec![(1.0, 849.0), (8.0, 2_100.0), (32.0, 3_972.0)]),
                Series {
                    reference: true,
                    ..Series::new("raw PostgreSQL", vec![(1.0, 4_777.0), (32.0, 12_916.0)])
                },
            ],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&line).unwrap();
        for text in [
            "<svg",
            "Appends",
            "writers",
            "events/s",
            "memd",
            "raw PostgreSQL",
        ] {
            assert!(svg.contains(text), "{text} in {svg}");
        }
        let bar = dir.join(format!("memd-bars-{}.svg", std::process::id()));
        bars(
            &bar,
            "Transfer",
            "events/s",
            &["export".into(), "import".into()],
            &[("events/s".into(), vec![10_987.0, 17_014.0])],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&bar).unwrap();
        for text in ["Transfer", "export", "import", "11k", "17k", "events/s"] {
            assert!(svg.contains(text), "{text} in {svg}");
        }
        let _ = std::fs::remove_file(line);
        let _ = std::fs::remove_file(bar);
    }
}
