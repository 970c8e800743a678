//! The one column-priority table the Results, Ladder and Effects tabs
//! share. Each column states the width its cells want, how narrow it may be
//! cut and how much it matters; `fit` decides, at the screen's width, which
//! columns are shown and how wide, the same way on every tab. A narrow
//! terminal loses the least important columns whole, rather than every
//! column losing its last characters.

/// One column's claim on the width. Columns are one space apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Column {
    /// The width its widest cell (or its head) needs.
    pub want: usize,
    /// The narrowest it may be cut to; `want` for a column never cut.
    pub min: usize,
    /// 0: always shown. Otherwise shown whole, lowest number first, while
    /// it fits; a column that does not fit leaves the room to the next.
    pub priority: u8,
    /// Takes the width every other column leaves, up to `want`; hidden
    /// where less than `min` is left (a bar).
    pub fill: bool,
}

impl Column {
    /// Always shown, at its width.
    pub fn kept(w: usize) -> Column {
        Column {
            want: w,
            min: w,
            priority: 0,
            fill: false,
        }
    }

    /// Always shown; cut from `want` towards `min` where the width is short.
    pub fn cut_to(min: usize, want: usize) -> Column {
        Column {
            want: want.max(min),
            min,
            priority: 0,
            fill: false,
        }
    }

    /// Shown whole while it fits, before any column of a larger `priority`.
    pub fn optional(w: usize, priority: u8) -> Column {
        Column {
            want: w,
            min: w,
            priority: priority.max(1),
            fill: false,
        }
    }

    /// What the others leave, between `min` and `max`.
    pub fn fill(min: usize, max: usize) -> Column {
        Column {
            want: max,
            min,
            priority: u8::MAX,
            fill: true,
        }
    }
}

/// Each column's width at `width`, `None` where it is hidden. In order:
/// the kept columns at their narrowest; the optional ones by priority while
/// they fit whole; the kept ones widened back towards what they want, from
/// left to right; last the fill columns with what remains.
pub(super) fn fit(cols: &[Column], width: usize) -> Vec<Option<usize>> {
    let mut shown: Vec<Option<usize>> = vec![None; cols.len()];
    let gap = |shown: &[Option<usize>]| usize::from(shown.iter().any(Option::is_some));
    let mut used = 0;
    for (i, c) in cols.iter().enumerate() {
        if c.priority == 0 {
            used += gap(&shown) + c.min;
            shown[i] = Some(c.min);
        }
    }
    let mut order: Vec<usize> = (0..cols.len())
        .filter(|&i| cols[i].priority > 0 && !cols[i].fill)
        .collect();
    order.sort_by_key(|&i| cols[i].priority);
    for i in order {
        let w = gap(&shown) + cols[i].want;
        if used + w <= width {
            shown[i] = Some(cols[i].want);
            used += w;
        }
    }
    for (i, c) in cols.iter().enumerate() {
        if let (0, Some(w)) = (c.priority, shown[i]) {
            let more = (c.want - w).min(width.saturating_sub(used));
            shown[i] = Some(w + more);
            used += more;
        }
    }
    for (i, c) in cols.iter().enumerate().filter(|(_, c)| c.fill) {
        let left = width.saturating_sub(used + gap(&shown));
        if left >= c.min {
            let w = left.min(c.want);
            used += gap(&shown) + w;
            shown[i] = Some(w);
        }
    }
    shown
}

/// The items of the shown columns, in order: a row's cells, a head.
pub(super) fn pick<T>(fit: &[Option<usize>], items: impl IntoIterator<Item = T>) -> Vec<T> {
    items
        .into_iter()
        .zip(fit)
        .filter_map(|(x, w)| w.map(|_| x))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_columns_go_whole_by_priority_and_a_narrow_one_takes_the_room_left() {
        let cols = [
            Column::kept(10),
            Column::optional(8, 1),
            Column::optional(20, 2),
            Column::optional(3, 3),
        ];
        // 10 + 1 + 8 = 19; the 20-wide second choice does not fit in 39 -
        // 19, the 3-wide third does.
        assert_eq!(fit(&cols, 39), [Some(10), Some(8), None, Some(3)]);
        assert_eq!(fit(&cols, 44), [Some(10), Some(8), Some(20), Some(3)]);
        assert_eq!(fit(&cols, 14), [Some(10), None, None, Some(3)]);
        assert_eq!(fit(&cols, 13), [Some(10), None, None, None]);
        // The kept column stays even where it does not fit.
        assert_eq!(fit(&cols, 4), [Some(10), None, None, None]);
    }

    #[test]
    fn a_cut_column_grows_back_before_the_fill_and_the_fill_hides_below_its_min() {
        let cols = [Column::cut_to(4, 20), Column::fill(7, 61), Column::kept(5)];
        // 4 + 1 + 5 kept, the name grows to 20, the bar gets 60 - 26 - 1.
        assert_eq!(fit(&cols, 60), [Some(20), Some(33), Some(5)]);
        // The bar is capped at its most.
        assert_eq!(fit(&cols, 200), [Some(20), Some(61), Some(5)]);
        // 30: the name takes 20, 30 - 26 - 1 = 3 < 7 leaves no bar.
        assert_eq!(fit(&cols, 30), [Some(20), None, Some(5)]);
        assert_eq!(fit(&cols, 15), [Some(9), None, Some(5)]);
    }

    #[test]
    fn pick_keeps_the_shown_columns_items_in_order() {
        let f = [Some(3), None, Some(1)];
        assert_eq!(pick(&f, ["a", "b", "c"]), ["a", "c"]);
    }
}
