//! Two-level designs for ablation studies: full factorials, tabulated and
//! user-specified fractional factorials with their alias structure, and the
//! permutation "ladders" used for sampled Shapley credit.
//!
//! A factor ("trick") is on (+1) or off (−1). A run or configuration is a
//! bitmask of the factors at +1, and an effect word (a term) is a bitmask of
//! the factors whose ±1 levels are multiplied (0 is the identity I, the mean).
//! Notation and algebra of words follow Montgomery, *Design and Analysis of
//! Experiments* (8th ed., 2013), §8.2–8.5: multiplying two words is the
//! symmetric difference of their letters (A·A = I), i.e. XOR of bitmasks.

use std::collections::HashSet;

use crate::util::splitmix::SplitMix64;

/// An effect word: bit `i` set means factor `i` is in the product; 0 is I.
pub type Word = u32;

/// Largest number of factors handled. 2^16 runs is already far beyond any
/// training budget, and sixteen letters (skipping I) fit the textbook labels.
pub const MAX_FACTORS: usize = 16;

/// Factor letters in the textbook convention: A, B, …, H, J, … — the letter I
/// is skipped because it denotes the identity word (Montgomery Table 8.14).
const LETTERS: [char; MAX_FACTORS] = [
    'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H', 'J', 'K', 'L', 'M', 'N', 'O', 'P', 'Q',
];

/// Order of a word: the number of factors in it (1 = main effect, 2 = 2fi).
pub fn order(w: Word) -> u32 {
    w.count_ones()
}

/// Indices of the factors in a word, ascending.
pub fn factors_of(w: Word) -> Vec<usize> {
    (0..32).filter(|i| w & (1 << i) != 0).collect()
}

/// Human label of a word: factor names joined by "×" ("I" for the identity).
/// Factors without a name (index past `names`) fall back to their letter.
pub fn word_label(w: Word, names: &[String]) -> String {
    if w == 0 {
        return "I".to_string();
    }
    factors_of(w)
        .into_iter()
        .map(|i| match names.get(i) {
            Some(name) => name.clone(),
            None => letter(i),
        })
        .collect::<Vec<_>>()
        .join("×")
}

/// Textbook label of a word: letters run together, "I" for the identity
/// (e.g. bits 0, 1, 8 → "ABJ"; I is skipped as a factor letter).
pub fn letters(w: Word) -> String {
    if w == 0 {
        return "I".to_string();
    }
    factors_of(w).into_iter().map(letter).collect()
}

/// Letter of one factor; indices past the sixteen letters get a numbered name.
fn letter(i: usize) -> String {
    match LETTERS.get(i) {
        Some(c) => c.to_string(),
        None => format!("X{i}"),
    }
}

/// Sorting key for words: by order first, then by value (the order used for
/// defining relations and alias lists throughout).
fn word_key(w: &Word) -> (u32, Word) {
    (order(*w), *w)
}

/// A two-level design: the runs, and for fractional designs the generators
/// and the defining contrast subgroup they span.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Design {
    /// Number of factors (tricks).
    pub k: usize,
    /// Each run as the bitmask of factors at +1, in standard (Yates) order of
    /// the base factors.
    pub runs: Vec<u32>,
    /// Generated factor index and the word of base factors it equals
    /// (empty for a full factorial).
    pub generators: Vec<(usize, Word)>,
    /// Every word of the defining contrast subgroup except I, sorted by order
    /// then value (empty for a full factorial).
    pub defining_relation: Vec<Word>,
}

impl Design {
    /// Number of runs in one replicate of the design.
    pub fn n_runs(&self) -> usize {
        self.runs.len()
    }

    /// Resolution: the shortest word in the defining relation (Box & Hunter
    /// 1961; Montgomery §8.2.2). `None` for a full factorial, where nothing
    /// is aliased.
    pub fn resolution(&self) -> Option<u32> {
        self.defining_relation.iter().map(|w| order(*w)).min()
    }

    /// Level (±1) of `factor` in run number `run`.
    pub fn level(&self, run: usize, factor: usize) -> i8 {
        if self.runs[run] & (1 << factor) != 0 {
            1
        } else {
            -1
        }
    }

    /// The ±1 column of a term (product of its factors' levels) over the runs.
    pub fn column(&self, term: Word) -> Vec<i8> {
        self.runs.iter().map(|&r| term_sign(r, term)).collect()
    }

    /// Words aliased with `term`: its product with each defining word
    /// (Montgomery §8.2.1), sorted by order then value. The term itself is
    /// not listed; an empty list means nothing is aliased with it.
    pub fn aliases(&self, term: Word) -> Vec<Word> {
        let mut out: Vec<Word> = self.defining_relation.iter().map(|w| w ^ term).collect();
        out.sort_by_key(word_key);
        out
    }

    /// Alias table of every main effect and two-factor interaction, listing
    /// only aliases of order ≤ `max_order` (textbooks usually show up to 3).
    pub fn alias_table(&self, max_order: u32) -> Vec<(Word, Vec<Word>)> {
        low_order_terms(self.k)
            .into_iter()
            .map(|t| {
                let shown = self
                    .aliases(t)
                    .into_iter()
                    .filter(|a| order(*a) <= max_order)
                    .collect();
                (t, shown)
            })
            .collect()
    }

    /// Whether a term is "clean": none of its aliases is the mean, a main
    /// effect or a two-factor interaction, so under the usual assumption that
    /// interactions of order ≥ 3 are negligible its estimate is not biased by
    /// another low-order term ("clear" effects of Wu & Chen 1992,
    /// Technometrics 34:162–175).
    pub fn estimable(&self, term: Word) -> bool {
        self.aliases(term).iter().all(|a| order(*a) > 2)
    }
}

/// All main effects and two-factor interactions of `k` factors, sorted by
/// order then value.
fn low_order_terms(k: usize) -> Vec<Word> {
    let mains = (0..k).map(|i| 1u32 << i);
    let pairs = (0..k).flat_map(|i| (i + 1..k).map(move |j| (1u32 << i) | (1u32 << j)));
    let mut out: Vec<Word> = mains.chain(pairs).collect();
    out.sort_by_key(word_key);
    out
}

/// Sign (±1) of a term in a run: the product of its factors' levels, which is
/// −1 exactly when an odd number of the term's factors are at −1.
pub fn term_sign(run: u32, term: Word) -> i8 {
    if (term & !run).count_ones().is_multiple_of(2) {
        1
    } else {
        -1
    }
}

fn check_k(k: usize) -> Result<(), String> {
    if k == 0 {
        return Err("a design needs at least one trick; list the tricks to ablate".to_string());
    }
    Ok(())
}

/// The full 2^k factorial in standard (Yates) order: run `r` has factor `i`
/// at +1 exactly when bit `i` of `r` is 1 ((1), a, b, ab, c, …; Montgomery
/// §6.2–6.4).
pub fn full_factorial(k: usize) -> Result<Design, String> {
    check_k(k)?;
    if k > MAX_FACTORS {
        return Err(format!(
            "a full factorial of {k} tricks is {} runs; use a fractional design (kind = \"fractional\", fraction = p) or fewer tricks",
            1u64 << k.min(63)
        ));
    }
    Ok(Design {
        k,
        runs: (0..1u32 << k).collect(),
        generators: Vec::new(),
        defining_relation: Vec::new(),
    })
}

/// One row of the design table: (k, p, resolution, generators).
type TableRow = (usize, usize, u32, &'static [&'static str]);

/// Minimum-aberration 2^(k−p) designs with k = 3..=11.
///
/// Source: Montgomery, *Design and Analysis of Experiments* (8th ed., 2013),
/// Table 8.14 "Selected 2^(k−p) Fractional Factorial Designs" (the same
/// generators, written with column numbers, are the NIST/SEMATECH
/// e-Handbook of Statistical Methods §5.3.3.4.7 "Summary tables of useful
/// fractional factorial designs"; the resolution-IV rows also match NIST
/// Dataplot's DEXRES4 table). Letters skip I, as in the book. Only the
/// positive (principal) fraction is used.
///
/// The p = 1 rows for k = 8..=11 are not in Table 8.14; they are the
/// highest-resolution half fraction, I = (all k letters) (Montgomery §8.2),
/// which is trivially minimum aberration because it has a single word of the
/// greatest possible length.
const TABLE: &[TableRow] = &[
    (3, 1, 3, &["C=AB"]),
    (4, 1, 4, &["D=ABC"]),
    (5, 1, 5, &["E=ABCD"]),
    (5, 2, 3, &["D=AB", "E=AC"]),
    (6, 1, 6, &["F=ABCDE"]),
    (6, 2, 4, &["E=ABC", "F=BCD"]),
    (6, 3, 3, &["D=AB", "E=AC", "F=BC"]),
    (7, 1, 7, &["G=ABCDEF"]),
    (7, 2, 4, &["F=ABCD", "G=ABDE"]),
    (7, 3, 4, &["E=ABC", "F=BCD", "G=ACD"]),
    (7, 4, 3, &["D=AB", "E=AC", "F=BC", "G=ABC"]),
    (8, 1, 8, &["H=ABCDEFG"]),
    (8, 2, 5, &["G=ABCD", "H=ABEF"]),
    (8, 3, 4, &["F=ABC", "G=ABD", "H=BCDE"]),
    (8, 4, 4, &["E=BCD", "F=ACD", "G=ABC", "H=ABD"]),
    (9, 1, 9, &["J=ABCDEFGH"]),
    (9, 2, 6, &["H=ACDFG", "J=BCEFG"]),
    (9, 3, 4, &["G=ABCD", "H=ACEF", "J=CDEF"]),
    (9, 4, 4, &["F=BCDE", "G=ACDE", "H=ABDE", "J=ABCE"]),
    (9, 5, 3, &["E=ABC", "F=BCD", "G=ACD", "H=ABD", "J=ABCD"]),
    (10, 1, 10, &["K=ABCDEFGHJ"]),
    (10, 3, 5, &["H=ABCG", "J=BCDE", "K=ACDF"]),
    (10, 4, 4, &["G=BCDF", "H=ACDF", "J=ABDE", "K=ABCE"]),
    (
        10,
        5,
        4,
        &["F=ABCD", "G=ABCE", "H=ABDE", "J=ACDE", "K=BCDE"],
    ),
    (
        10,
        6,
        3,
        &["E=ABC", "F=BCD", "G=ACD", "H=ABD", "J=ABCD", "K=AB"],
    ),
    (11, 1, 11, &["L=ABCDEFGHJK"]),
    (11, 4, 5, &["H=ABCG", "J=BCDE", "K=ACDF", "L=ABCDEFG"]),
    (11, 5, 4, &["G=CDE", "H=ABCD", "J=ABF", "K=BDEF", "L=ADEF"]),
    (
        11,
        6,
        4,
        &["F=ABC", "G=BCD", "H=CDE", "J=ACD", "K=ADE", "L=BDE"],
    ),
    (
        11,
        7,
        3,
        &["E=ABC", "F=BCD", "G=ACD", "H=ABD", "J=ABCD", "K=AB", "L=AC"],
    ),
];

/// Fractions tabulated for `k` factors.
fn tabulated_p(k: usize) -> Vec<usize> {
    TABLE.iter().filter(|r| r.0 == k).map(|r| r.1).collect()
}

/// "1, 2 or 3" style list.
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// The tabulated minimum-aberration 2^(k−p) design (see [`TABLE`]'s source);
/// p = 0 is the full factorial. Base factors are the first k−p, generated
/// factors the last p.
pub fn fractional(k: usize, p: usize) -> Result<Design, String> {
    if p == 0 {
        return full_factorial(k);
    }
    if let Some(row) = TABLE.iter().find(|r| r.0 == k && r.1 == p) {
        return fractional_with(k, row.3);
    }
    let ps = tabulated_p(k);
    if ps.is_empty() {
        return Err(format!(
            "no tabulated 2^({k}-{p}) design: the table covers 3 to 11 tricks; write them out (`generators = [\"E=ABCD\", ...]`) or use the full factorial"
        ));
    }
    let list: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
    Err(format!(
        "no tabulated 2^({k}-{p}) design; for {k} tricks use fraction = {} (or give generators)",
        or_list(&list)
    ))
}

/// Index of a factor letter (A.., skipping I), if it names one of `k` factors.
fn letter_index(c: char, k: usize) -> Option<usize> {
    LETTERS[..k.min(MAX_FACTORS)].iter().position(|&l| l == c)
}

/// Letters A.. of the factors in `range`, e.g. "A..D".
fn letter_range(lo: usize, hi_exclusive: usize) -> String {
    if hi_exclusive <= lo + 1 {
        return letter(lo);
    }
    format!("{}..{}", letter(lo), letter(hi_exclusive - 1))
}

/// Parse one generator "E=ABC" for a design with `k` factors of which the
/// first `base` are base factors. Returns (generated factor, word).
fn parse_generator(text: &str, k: usize, base: usize) -> Result<(usize, Word), String> {
    let upper = text.trim().to_ascii_uppercase();
    let Some((lhs, rhs)) = upper.split_once('=') else {
        return Err(format!(
            "generator \"{text}\" is not of the form E=ABC; write the generated factor, '=', then base-factor letters"
        ));
    };
    let (lhs, rhs) = (lhs.trim(), rhs.trim());
    if rhs.starts_with('-') || rhs.starts_with('+') {
        return Err(format!(
            "generator \"{text}\": signed generators are not supported; write it without a sign (the other fraction has the same aliases)"
        ));
    }
    let mut lhs_chars = lhs.chars();
    let (Some(gen_letter), None) = (lhs_chars.next(), lhs_chars.next()) else {
        return Err(format!(
            "generator \"{text}\": the left side must be one factor letter, e.g. {}=AB",
            letter(k - 1)
        ));
    };
    let all = letter_range(0, k);
    let Some(generated) = letter_index(gen_letter, k) else {
        return Err(format!(
            "generator \"{text}\": {gen_letter} is not one of the {k} factor letters {all} (I is skipped)"
        ));
    };
    if generated < base {
        return Err(format!(
            "generator \"{text}\": {gen_letter} is a base factor; with {k} tricks and {} generators the generated factors are {}",
            k - base,
            letter_range(base, k)
        ));
    }
    let word = parse_word(text, rhs, k, base)?;
    if order(word) < 2 {
        return Err(format!(
            "generator \"{text}\": a generator word needs at least two base factors, otherwise {gen_letter} duplicates a base factor"
        ));
    }
    Ok((generated, word))
}

/// Parse the right side of a generator into a word of base factors.
fn parse_word(text: &str, rhs: &str, k: usize, base: usize) -> Result<Word, String> {
    let mut word: Word = 0;
    for c in rhs.chars().filter(|c| !c.is_whitespace()) {
        let Some(i) = letter_index(c, k) else {
            return Err(format!(
                "generator \"{text}\": {c} is not one of the {k} factor letters {} (I is skipped)",
                letter_range(0, k)
            ));
        };
        if i >= base {
            return Err(format!(
                "generator \"{text}\": {c} is a generated factor; words may use only the base factors {}",
                letter_range(0, base)
            ));
        }
        if word & (1 << i) != 0 {
            return Err(format!(
                "generator \"{text}\": {c} appears twice; list each base factor once"
            ));
        }
        word |= 1 << i;
    }
    Ok(word)
}

/// A 2^(k−p) fractional factorial from user generators such as "E=ABCD"
/// (p = number of generators). Base factors are the first k−p letters and
/// must make up every word; each of the last p letters is generated once.
/// Only positive generators (the principal fraction) are accepted.
pub fn fractional_with(k: usize, generators: &[&str]) -> Result<Design, String> {
    check_k(k)?;
    if k > MAX_FACTORS {
        return Err(format!(
            "{k} tricks is more than the {MAX_FACTORS} this tool designs for; ablate fewer tricks at once"
        ));
    }
    let p = generators.len();
    if p == 0 {
        return full_factorial(k);
    }
    if p + 2 > k {
        return Err(format!(
            "{p} generators for {k} tricks leave fewer than two base factors; use at most {} generators",
            k.saturating_sub(2)
        ));
    }
    let base = k - p;
    let mut parsed: Vec<(usize, Word)> = Vec::with_capacity(p);
    for text in generators {
        let (generated, word) = parse_generator(text, k, base)?;
        if let Some(m) = parsed.iter().position(|g| g.0 == generated) {
            return Err(format!(
                "generators \"{}\" and \"{text}\" both define {}; give one generator per generated factor",
                generators[m],
                letter(generated)
            ));
        }
        if let Some(m) = parsed.iter().position(|g| g.1 == word) {
            return Err(format!(
                "generators \"{}\" and \"{text}\" use the same word, so {} and {} would be identical; use different words",
                generators[m],
                letter(parsed[m].0),
                letter(generated)
            ));
        }
        parsed.push((generated, word));
    }
    parsed.sort_unstable();
    Ok(build_fraction(k, parsed))
}

/// Runs and defining relation of a fraction with validated generators.
fn build_fraction(k: usize, generators: Vec<(usize, Word)>) -> Design {
    let base = k - generators.len();
    // Runs: the base factors in Yates order; each generated factor is the
    // product of its word's levels (Montgomery §8.2, "basic design").
    let runs = (0..1u32 << base)
        .map(|r| {
            generators.iter().fold(r, |run, &(g, w)| {
                if term_sign(r, w) > 0 {
                    run | (1 << g)
                } else {
                    run
                }
            })
        })
        .collect();
    let defining_relation = defining_relation(&generators);
    Design {
        k,
        runs,
        generators,
        defining_relation,
    }
}

/// All products of the generator words E·(ABC) = ABCE… (the defining
/// contrast subgroup, Montgomery §8.3), without I, sorted by order then value.
fn defining_relation(generators: &[(usize, Word)]) -> Vec<Word> {
    let words: Vec<Word> = generators.iter().map(|&(g, w)| w | (1 << g)).collect();
    let mut out: Vec<Word> = (1u32..1 << words.len())
        .map(|subset| {
            words
                .iter()
                .enumerate()
                .filter(|(j, _)| subset & (1 << j) != 0)
                .fold(0, |acc, (_, w)| acc ^ w)
        })
        .collect();
    out.sort_by_key(word_key);
    out
}

/// `m` random orders (permutations of 0..n) for sampled Shapley values, by
/// Fisher–Yates shuffles (Knuth, TAOCP vol. 2, §3.4.2, Algorithm P) driven by
/// one `SplitMix64(seed)` stream.
pub fn sample_orders(n: usize, m: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = SplitMix64(seed);
    (0..m)
        .map(|_| {
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                let j = rng.below(i + 1);
                order.swap(i, j);
            }
            order
        })
        .collect()
}

/// The configuration ladder of one order: ∅, {o0}, {o0,o1}, …, all.
///
/// # Panics
/// If a factor index is 32 or more (a configuration is a `u32` bitmask).
fn ladder(order: &[usize]) -> impl Iterator<Item = Word> + '_ {
    std::iter::once(0).chain(order.iter().scan(0u32, |set, &i| {
        assert!(
            i < 32,
            "factor index {i} does not fit a 32-bit configuration"
        );
        *set |= 1 << i;
        Some(*set)
    }))
}

/// Distinct configurations (sets of tricks on) visited by the ladders of all
/// `orders` — every prefix, including the empty and the full set — in
/// first-visit order. A set reached by several orders is listed once, since
/// its runs serve every ladder that passes through it.
///
/// # Panics
/// If a factor index is 32 or more.
pub fn order_configs(orders: &[Vec<usize>]) -> Vec<Word> {
    let mut seen = HashSet::new();
    orders
        .iter()
        .flat_map(|o| ladder(o))
        .filter(|c| seen.insert(*c))
        .collect()
}

/// (rungs if every order ran its own ladder = Σ (len + 1) = m·(n+1),
/// distinct configurations actually needed).
pub fn runs_saved(orders: &[Vec<usize>]) -> (usize, usize) {
    let rungs = orders.iter().map(|o| o.len() + 1).sum();
    (rungs, order_configs(orders).len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Word {
        s.chars()
            .map(|c| 1u32 << letter_index(c, 16).unwrap())
            .sum()
    }

    #[test]
    fn labels() {
        assert_eq!(letters(0), "I");
        assert_eq!(letters(0b1_0000_0011), "ABJ");
        let names: Vec<String> = ["warmup", "ema"].iter().map(|s| s.to_string()).collect();
        assert_eq!(word_label(0b11, &names), "warmup×ema");
        assert_eq!(word_label(0b101, &names), "warmup×C");
        assert_eq!(word_label(0, &names), "I");
        assert_eq!(order(w("ABD")), 3);
    }

    #[test]
    fn full_factorial_is_yates_order() {
        let d = full_factorial(3).unwrap();
        assert_eq!(d.runs, (0..8).collect::<Vec<_>>());
        // Run 5 = binary 101: A and C high, B low (standard order a·c).
        assert_eq!((d.level(5, 0), d.level(5, 1), d.level(5, 2)), (1, -1, 1));
        assert_eq!(d.resolution(), None);
        assert!(d.aliases(w("AB")).is_empty());
        assert!(d.estimable(w("AB")));
    }

    #[test]
    fn full_factorial_refuses_too_many() {
        let e = full_factorial(17).unwrap_err();
        assert!(e.contains("17 tricks") && e.contains("131072"), "{e}");
        assert!(e.contains("fractional"), "{e}");
        let e = full_factorial(0).unwrap_err();
        assert!(e.contains("at least one trick"), "{e}");
    }

    #[test]
    fn half_fraction_5_is_resolution_5() {
        let d = fractional(5, 1).unwrap();
        assert_eq!(d.defining_relation, vec![w("ABCDE")]);
        assert_eq!(d.resolution(), Some(5));
        assert_eq!(d.n_runs(), 16);
        for (t, aliases) in d.alias_table(5) {
            assert_eq!(aliases.len(), 1);
            // A main effect's only alias is a 4-factor word, a 2fi's a 3-factor one.
            assert_eq!(order(aliases[0]), 5 - order(t));
            assert!(d.estimable(t));
        }
        // Every run is in the principal fraction: ABCDE = +1.
        assert!(d.runs.iter().all(|&r| term_sign(r, w("ABCDE")) == 1));
    }

    #[test]
    fn quarter_fraction_6_matches_montgomery() {
        // Montgomery Table 8.14: 2^(6-2)_IV with E = ABC, F = BCD, so
        // I = ABCE = BCDF = ADEF.
        let d = fractional(6, 2).unwrap();
        assert_eq!(d.generators, vec![(4, w("ABC")), (5, w("BCD"))]);
        assert_eq!(d.defining_relation, vec![w("ABCE"), w("BCDF"), w("ADEF")]);
        assert_eq!(d.resolution(), Some(4));
        // In resolution IV, main effects are clean and some 2fis are not.
        assert!(d.estimable(w("A")));
        assert_eq!(d.aliases(w("AB"))[0], w("CE"));
        assert!(!d.estimable(w("AB")));
        // A table showing only up to 2fis lists CE for AB and nothing for A.
        let table = d.alias_table(2);
        assert!(
            table
                .iter()
                .any(|(t, a)| *t == w("AB") && a == &vec![w("CE")])
        );
        assert!(table.iter().any(|(t, a)| *t == w("A") && a.is_empty()));
    }

    #[test]
    fn eighth_of_7_in_8_runs_is_resolution_3() {
        let d = fractional(7, 4).unwrap();
        assert_eq!(d.n_runs(), 8);
        assert_eq!(d.resolution(), Some(3));
        assert_eq!(d.defining_relation.len(), 15);
        // D = AB makes A aliased with BD.
        assert!(d.aliases(w("A")).contains(&w("BD")));
        assert!(!d.estimable(w("A")));
    }

    #[test]
    fn every_tabulated_design_is_valid() {
        for &(k, p, res, _) in TABLE {
            let d = fractional(k, p).unwrap();
            assert_eq!(d.n_runs(), 1 << (k - p), "2^({k}-{p})");
            assert_eq!(d.resolution(), Some(res), "2^({k}-{p}) resolution");
            assert_eq!(d.defining_relation.len(), (1 << p) - 1);
            // Distinct runs, each factor balanced, main effects orthogonal.
            let distinct: HashSet<u32> = d.runs.iter().copied().collect();
            assert_eq!(distinct.len(), d.n_runs());
            let cols: Vec<Vec<i8>> = (0..k).map(|i| d.column(1 << i)).collect();
            for (i, a) in cols.iter().enumerate() {
                assert_eq!(
                    a.iter().map(|&x| x as i32).sum::<i32>(),
                    0,
                    "2^({k}-{p}) {i}"
                );
                for b in &cols[i + 1..] {
                    let dot: i32 = a.iter().zip(b).map(|(&x, &y)| (x * y) as i32).sum();
                    assert_eq!(dot, 0, "2^({k}-{p}) columns not orthogonal");
                }
            }
            // Each defining word is +1 on every run (principal fraction).
            for &word in &d.defining_relation {
                assert!(d.column(word).iter().all(|&x| x == 1));
            }
        }
        for k in 3..=11 {
            assert!(!tabulated_p(k).is_empty(), "k = {k} not covered");
        }
    }

    /// Word-length pattern (A3, A4, …): the number of defining words of each
    /// length; minimum aberration minimises it lexicographically (Fries &
    /// Hunter 1980, Technometrics 22:601–608).
    fn wlp(k: usize, words: &[Word]) -> Vec<usize> {
        let gens: Vec<(usize, Word)> = words
            .iter()
            .enumerate()
            .map(|(j, &w)| (k - words.len() + j, w))
            .collect();
        let rel = defining_relation(&gens);
        (3..=k as u32)
            .map(|l| rel.iter().filter(|&&x| order(x) == l).count())
            .collect()
    }

    /// Lexicographically smallest word-length pattern over every choice of
    /// `p` distinct generator words from the base-factor interactions.
    fn best_wlp(k: usize, p: usize) -> Vec<usize> {
        let base = k - p;
        let cands: Vec<Word> = (1u32..1 << base).filter(|&c| order(c) >= 2).collect();
        let mut best: Option<Vec<usize>> = None;
        let mut pick = Vec::with_capacity(p);
        fn rec(
            start: usize,
            cands: &[Word],
            p: usize,
            k: usize,
            pick: &mut Vec<Word>,
            best: &mut Option<Vec<usize>>,
        ) {
            if pick.len() == p {
                let pat = wlp(k, pick);
                if best.as_ref().is_none_or(|b| pat < *b) {
                    *best = Some(pat);
                }
                return;
            }
            for i in start..cands.len() {
                pick.push(cands[i]);
                rec(i + 1, cands, p, k, pick, best);
                pick.pop();
            }
        }
        rec(0, &cands, p, k, &mut pick, &mut best);
        best.unwrap()
    }

    fn binomial(n: usize, r: usize) -> usize {
        (0..r).fold(1, |acc, i| acc * (n - i) / (i + 1))
    }

    #[test]
    fn tabulated_designs_have_minimum_aberration() {
        // Exhaustive check where the search is small enough for a debug test
        // (≤ 70 000 generator sets: 25 of the 30 rows); the five larger rows
        // (2^(10-3), 2^(10-4), 2^(11-4), 2^(11-5), 2^(11-6)) were checked the
        // same way once in release mode (NOTES.md).
        let mut checked = 0;
        for &(k, p, _, _) in TABLE {
            let base = k - p;
            let n_cands = (1usize << base) - 1 - base;
            if binomial(n_cands, p) > 70_000 {
                continue;
            }
            let d = fractional(k, p).unwrap();
            let words: Vec<Word> = d.generators.iter().map(|g| g.1).collect();
            assert_eq!(
                wlp(k, &words),
                best_wlp(k, p),
                "2^({k}-{p}) is not minimum aberration"
            );
            checked += 1;
        }
        assert_eq!(checked, 25, "rows checked");
    }

    #[test]
    fn unknown_fraction_lists_available() {
        let e = fractional(6, 4).unwrap_err();
        assert!(e.contains("2^(6-4)") && e.contains("1, 2 or 3"), "{e}");
        let e = fractional(14, 2).unwrap_err();
        assert!(e.contains("2^(14-2)") && e.contains("3 to 11"), "{e}");
        assert_eq!(fractional(4, 0).unwrap(), full_factorial(4).unwrap());
    }

    #[test]
    fn user_generators() {
        let d = fractional_with(5, &["D=AB", "E=AC"]).unwrap();
        assert_eq!(d, fractional(5, 2).unwrap());
        let d = fractional_with(10, &[" k = acdf ", "H=ABCG", "J=BCDE"]).unwrap();
        assert_eq!(d, fractional(10, 3).unwrap());
        assert_eq!(d.resolution(), Some(5));
    }

    #[test]
    fn user_generator_errors_name_the_generator() {
        let cases: &[(usize, &[&str], &[&str])] = &[
            (5, &["EABCD"], &["\"EABCD\"", "E=ABC"]),
            (5, &["E=-ABCD"], &["\"E=-ABCD\"", "without a sign"]),
            (5, &["EF=ABC"], &["\"EF=ABC\"", "one factor letter"]),
            (5, &["Z=ABC"], &["\"Z=ABC\"", "Z is not", "A..E"]),
            (5, &["B=ACD"], &["\"B=ACD\"", "B is a base factor", "E"]),
            (5, &["E=ABI"], &["\"E=ABI\"", "I is not", "I is skipped"]),
            (
                6,
                &["E=ABF", "F=ABC"],
                &["\"E=ABF\"", "F is a generated factor", "A..D"],
            ),
            (5, &["E=ABBC"], &["\"E=ABBC\"", "B appears twice"]),
            (5, &["E=A"], &["\"E=A\"", "at least two base factors"]),
            (
                6,
                &["E=ABC", "E=ABD"],
                &["\"E=ABC\"", "\"E=ABD\"", "both define E"],
            ),
            (
                6,
                &["E=ABC", "F=ABC"],
                &["\"F=ABC\"", "same word", "E and F"],
            ),
            (3, &["B=A", "C=A"], &["2 generators", "at most 1"]),
            (17, &["Q=AB"], &["17 tricks", "fewer tricks"]),
        ];
        for (k, gens, needles) in cases {
            let e = fractional_with(*k, gens).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
            for n in *needles {
                assert!(e.contains(n), "error for {gens:?} lacks {n:?}: {e}");
            }
        }
    }

    #[test]
    fn sampled_orders_are_permutations() {
        let orders = sample_orders(6, 50, 7);
        assert_eq!(orders.len(), 50);
        for o in &orders {
            let mut s = o.clone();
            s.sort_unstable();
            assert_eq!(s, (0..6).collect::<Vec<_>>());
        }
        assert_eq!(orders, sample_orders(6, 50, 7));
        assert_ne!(orders, sample_orders(6, 50, 8));
        // Fisher–Yates is uniform: each factor leads about 1/6 of 6000 orders.
        let many = sample_orders(6, 6000, 11);
        for i in 0..6 {
            let first = many.iter().filter(|o| o[0] == i).count();
            assert!(
                (850..1150).contains(&first),
                "factor {i} first {first} times"
            );
        }
    }

    #[test]
    fn ladders_share_configurations() {
        let all: Vec<Vec<usize>> = vec![
            vec![0, 1, 2],
            vec![0, 2, 1],
            vec![1, 0, 2],
            vec![1, 2, 0],
            vec![2, 0, 1],
            vec![2, 1, 0],
        ];
        let configs = order_configs(&all);
        let mut sorted = configs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
        assert_eq!(&configs[..4], &[0, 0b001, 0b011, 0b111]);
        assert_eq!(runs_saved(&all), (24, 8));
        assert_eq!(runs_saved(&all[..1]), (4, 4));
    }
}
