//! Sets of completion indexes in the API's interval form ("1,3-5,7"), as upstream's
//! `orderedIntervals` reads and writes status.completedIndexes and status.failedIndexes.

use std::collections::BTreeSet;
use std::fmt;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Indexes(BTreeSet<i32>);

impl Indexes {
    /// Parses the interval form, keeping indexes below `completions`; malformed parts
    /// are skipped, as upstream logs and skips them.
    pub fn parse(text: &str, completions: i32) -> Indexes {
        let mut set = BTreeSet::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
                None => (part.parse::<i32>(), part.parse::<i32>()),
            };
            let (Ok(first), Ok(last)) = (first, last) else { continue };
            if first < 0 || last < first {
                continue;
            }
            set.extend(first..=last.min(completions - 1));
        }
        Indexes(set)
    }

    pub fn has(&self, index: i32) -> bool {
        self.0.contains(&index)
    }

    pub fn total(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[cfg(test)]
    pub fn insert(&mut self, index: i32) {
        self.0.insert(index);
    }

    pub fn extend(&mut self, other: impl IntoIterator<Item = i32>) {
        self.0.extend(other);
    }

    pub fn iter(&self) -> impl Iterator<Item = i32> + '_ {
        self.0.iter().copied()
    }

    /// How many of `self` are in `other`.
    pub fn count_in(&self, other: &Indexes) -> usize {
        self.0.intersection(&other.0).count()
    }
}

impl fmt::Display for Indexes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.0.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end = iter.next().unwrap_or(end);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format_round_trip() {
        let set = Indexes::parse("0,2-4,7,x,9-8", 6);
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 2, 3, 4]);
        assert_eq!(set.to_string(), "0,2-4");
        assert_eq!(Indexes::parse("", 3).to_string(), "");
        let mut s = Indexes::default();
        s.extend([5, 1, 2, 3, 9]);
        assert_eq!(s.to_string(), "1-3,5,9");
        assert_eq!(Indexes::parse("1-3", 10).count_in(&s), 3);
    }
}
