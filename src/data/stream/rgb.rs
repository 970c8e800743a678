//! The decoded image every decoder (zune-jpeg and png here, libjpeg-turbo
//! behind its feature) hands the resamplers and the store.

/// An RGB image, rows top to bottom, 3 bytes a pixel.
#[derive(Clone, Debug, PartialEq)]
pub struct Rgb {
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<u8>,
}
