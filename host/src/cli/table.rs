//! Aligned plain-text tables for the terminal.

/// A table whose columns are padded to their widest cell. Cells are plain strings; the last
/// column is not padded so lines carry no trailing spaces.
#[derive(Debug, Default)]
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with a header row.
    pub(crate) fn new<I, S>(header: I) -> Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            rows: vec![header.into_iter().map(Into::into).collect()],
        }
    }

    /// Appends a row.
    pub(crate) fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// The rendered table, one line per row.
    pub(crate) fn render(&self) -> String {
        self.render_continued(&mut Vec::new(), 0)
    }

    /// The rows from `first` on, rendered with each column as wide as its widest cell in this
    /// table and at least `widths` (which grows to match). For a listing printed page by
    /// page (`takt job list`): each page is a table with the header, the first printed
    /// whole and the later ones from row 1, so columns stay aligned across pages unless a
    /// later page is wider — without holding every row to measure them first.
    pub(crate) fn render_continued(&self, widths: &mut Vec<usize>, first: usize) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        if widths.len() < cols {
            widths.resize(cols, 0);
        }
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in self.rows.iter().skip(first) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                if i + 1 < row.len() {
                    let pad = widths[i] - cell.chars().count();
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_without_trailing_spaces() {
        let mut t = Table::new(["#", "utc", "note"]);
        t.row(["1", "2026-01-01T00:00:00Z", ""]);
        t.row(["10", "x", "shifted"]);
        assert_eq!(
            t.render(),
            "#   utc                   note\n1   2026-01-01T00:00:00Z\n10  x                     shifted\n"
        );
    }

    #[test]
    fn a_continued_page_keeps_the_columns_of_the_first() {
        let mut widths = Vec::new();
        let mut first = Table::new(["name", "state"]);
        first.row(["alpha-long", "on"]);
        let mut second = Table::new(["name", "state"]);
        second.row(["b", "off"]);
        let out = first.render_continued(&mut widths, 0) + &second.render_continued(&mut widths, 1);
        assert_eq!(out, "name        state\nalpha-long  on\nb           off\n");
    }
}
