//! Charts for write-ups, PNG and SVG, with plotters and an embedded font.
