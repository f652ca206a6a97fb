//! The benchmarks' tables: medians, and one renderer for aligned columns under a title,
//! with summary lines and notes below.

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::time::Duration;

/// A figure a median can be taken of.
pub trait Figure: Copy {
    fn order(&self, other: &Self) -> Ordering;
    fn mean_of_two(self, other: Self) -> Self;
}

impl Figure for Duration {
    fn order(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }

    fn mean_of_two(self, other: Self) -> Self {
        (self + other) / 2
    }
}

impl Figure for f64 {
    fn order(&self, other: &Self) -> Ordering {
        self.total_cmp(other)
    }

    fn mean_of_two(self, other: Self) -> Self {
        (self + other) / 2.0
    }
}

/// The middle value, or the mean of the two middle values for an even count. `None` for
/// no values. The median rather than the mean because this machine is shared and noisy:
/// one boot stalled by a neighbour should not move the figure.
pub fn median<T: Figure>(values: &[T]) -> Option<T> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(T::order);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[middle]),
        _ => Some(sorted[middle - 1].mean_of_two(sorted[middle])),
    }
}

/// How a column's cells sit in it: names left, numbers right so that their points line up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    pub header: &'static str,
    pub align: Align,
}

impl Column {
    pub const fn left(header: &'static str) -> Self {
        Self {
            header,
            align: Align::Left,
        }
    }

    pub const fn right(header: &'static str) -> Self {
        Self {
            header,
            align: Align::Right,
        }
    }
}

/// What a table says above and below its rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Caption {
    /// A line above the table saying what was run (accelerator, memory, runs).
    pub title: String,
    /// Lines printed under the table, each after "note: " (caveats on what a figure means).
    pub notes: Vec<String>,
}

/// The table as text: the title, the header, a rule, the rows, then `summary_lines` and the
/// notes, each line ending with a newline. Every row has a cell per column.
pub fn render(
    caption: &Caption,
    columns: &[Column],
    rows: &[Vec<String>],
    summary_lines: &[String],
) -> String {
    let headers: Vec<String> = columns
        .iter()
        .map(|column| column.header.to_owned())
        .collect();
    let widths: Vec<usize> = (0..columns.len())
        .map(|column| {
            rows.iter()
                .chain([&headers])
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |out: &mut String, row: &[String]| {
        let mut text = String::new();
        for (index, ((cell, column), width)) in row.iter().zip(columns).zip(&widths).enumerate() {
            let pad = " ".repeat(width - cell.chars().count());
            if index > 0 {
                text.push_str("  ");
            }
            match column.align {
                Align::Left => {
                    text.push_str(cell);
                    text.push_str(&pad);
                }
                Align::Right => {
                    text.push_str(&pad);
                    text.push_str(cell);
                }
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };

    let mut out = String::new();
    let _ = writeln!(out, "{}", caption.title);
    line(&mut out, &headers);
    let rule: Vec<String> = widths.iter().map(|width| "-".repeat(*width)).collect();
    line(&mut out, &rule);
    for row in rows {
        line(&mut out, row);
    }
    for summary in summary_lines {
        let _ = writeln!(out, "{summary}");
    }
    for note in &caption.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[ms(30), ms(10), ms(20)]), Some(ms(20)));
        assert_eq!(median(&[ms(40), ms(10), ms(30), ms(20)]), Some(ms(25)));
        assert_eq!(median(&[ms(7)]), Some(ms(7)));
        assert_eq!(median::<Duration>(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median::<f64>(&[]), None);
    }

    #[test]
    fn median_ignores_one_stalled_run() {
        assert_eq!(
            median(&[ms(100), ms(101), ms(5000), ms(99), ms(102)]),
            Some(ms(101))
        );
    }

    #[test]
    fn columns_are_aligned_and_trailing_space_trimmed() {
        let caption = Caption {
            title: "title".into(),
            notes: vec!["a caveat".into()],
        };
        let columns = [
            Column::left("name"),
            Column::right("n"),
            Column::left("what"),
        ];
        let rows = [
            vec!["a".to_owned(), "1.5".to_owned(), "x".to_owned()],
            vec!["longer".to_owned(), "10.25".to_owned(), String::new()],
        ];
        let expected = "\
title
name        n  what
------  -----  ----
a         1.5  x
longer  10.25
summary
note: a caveat
";
        assert_eq!(
            render(&caption, &columns, &rows, &["summary".to_owned()]),
            expected
        );
    }
}
