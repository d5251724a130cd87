//! Image header readers: the pixel size of a PNG, JPEG, GIF or WebP from its first bytes,
//! without decoding the image (the providers price images by pixel size, not by bytes).

/// An image format foldwire can read the size of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// PNG (size from the IHDR chunk).
    Png,
    /// JPEG (size from the first start-of-frame segment).
    Jpeg,
    /// GIF (size from the logical screen descriptor).
    Gif,
    /// WebP (lossy `VP8 `, lossless `VP8L` or extended `VP8X`).
    WebP,
}

/// What the first bytes of a payload say about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// An image of this format and size.
    Size {
        /// The format.
        format: ImageFormat,
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
    },
    /// The bytes start like an image of this format, but its size lies further in (or the
    /// header is damaged): more bytes may tell.
    Truncated(ImageFormat),
    /// Not an image format foldwire reads.
    Unknown,
}

/// Reads the header of the image starting at `bytes[0]`.
pub fn read_header(bytes: &[u8]) -> Header {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        png(bytes)
    } else if bytes.starts_with(&[0xFF, 0xD8]) {
        jpeg(bytes)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        gif(bytes)
    } else if bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP") {
        webp(bytes)
    } else {
        Header::Unknown
    }
}

/// The format and pixel size of an image, when its header says.
pub fn image_size(bytes: &[u8]) -> Option<(ImageFormat, u32, u32)> {
    match read_header(bytes) {
        Header::Size {
            format,
            width,
            height,
        } => Some((format, width, height)),
        Header::Truncated(_) | Header::Unknown => None,
    }
}

fn be16(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 2)?;
    Some(u32::from(u16::from_be_bytes([*s.first()?, *s.get(1)?])))
}

fn le16(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 2)?;
    Some(u32::from(u16::from_le_bytes([*s.first()?, *s.get(1)?])))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 3)?;
    Some(u32::from(*s.first()?) | u32::from(*s.get(1)?) << 8 | u32::from(*s.get(2)?) << 16)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_be_bytes(s))
}

fn sized(format: ImageFormat, size: Option<(u32, u32)>) -> Header {
    match size {
        Some((width, height)) => Header::Size {
            format,
            width,
            height,
        },
        None => Header::Truncated(format),
    }
}

/// PNG: the IHDR chunk comes first; width and height are big-endian at bytes 16 and 20.
fn png(b: &[u8]) -> Header {
    if b.len() >= 16 && b.get(12..16) != Some(b"IHDR") {
        return Header::Truncated(ImageFormat::Png);
    }
    sized(ImageFormat::Png, be32(b, 16).zip(be32(b, 20)))
}

/// GIF: the logical screen's width and height, little-endian at bytes 6 and 8.
fn gif(b: &[u8]) -> Header {
    sized(ImageFormat::Gif, le16(b, 6).zip(le16(b, 8)))
}

/// WebP: the first chunk after `RIFF....WEBP` says which encoding, and where its size is.
fn webp(b: &[u8]) -> Header {
    let size = match b.get(12..16) {
        // Lossy: a frame tag (3 bytes), the start code 9d 01 2a, then 14-bit sizes.
        Some(b"VP8 ") if b.get(23..26) == Some(&[0x9D, 0x01, 0x2A]) => le16(b, 26)
            .zip(le16(b, 28))
            .map(|(w, h)| (w & 0x3FFF, h & 0x3FFF)),
        // Lossless: signature 0x2f, then width-1 and height-1 in 14 bits each.
        Some(b"VP8L") if b.get(20) == Some(&0x2F) => b.get(21..25).map(|s| {
            let bits = u32::from_le_bytes([
                s.first().copied().unwrap_or(0),
                s.get(1).copied().unwrap_or(0),
                s.get(2).copied().unwrap_or(0),
                s.get(3).copied().unwrap_or(0),
            ]);
            ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
        }),
        // Extended: canvas width-1 and height-1, 24 bits each, at bytes 24 and 27.
        Some(b"VP8X") => le24(b, 24).zip(le24(b, 27)).map(|(w, h)| (w + 1, h + 1)),
        _ => None,
    };
    sized(ImageFormat::WebP, size)
}

/// JPEG: walks the segments to the first start-of-frame marker (SOF0..SOF15 except DHT
/// C4, JPG C8 and DAC CC), which holds the height then the width.
fn jpeg(b: &[u8]) -> Header {
    let mut at = 2;
    loop {
        // Markers may be preceded by any number of fill bytes 0xFF.
        while b.get(at) == Some(&0xFF) && b.get(at + 1) == Some(&0xFF) {
            at += 1;
        }
        let (Some(&0xFF), Some(&marker)) = (b.get(at), b.get(at + 1)) else {
            return Header::Truncated(ImageFormat::Jpeg);
        };
        at += 2;
        match marker {
            // Standalone markers carry no length.
            0x01 | 0xD0..=0xD7 => continue,
            // End of image or start of scan before any frame: no size to find.
            0xD9 | 0xDA => return Header::Truncated(ImageFormat::Jpeg),
            _ => {}
        }
        let Some(len) = be16(b, at) else {
            return Header::Truncated(ImageFormat::Jpeg);
        };
        let is_sof = matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if is_sof {
            // length (2), precision (1), height (2), width (2)
            return sized(ImageFormat::Jpeg, be16(b, at + 5).zip(be16(b, at + 3)));
        }
        if len < 2 {
            return Header::Truncated(ImageFormat::Jpeg);
        }
        at += len as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_header(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&[8, 2, 0, 0, 0]);
        b
    }

    #[test]
    fn png_size_comes_from_ihdr() {
        assert_eq!(
            image_size(&png_header(1200, 800)),
            Some((ImageFormat::Png, 1200, 800))
        );
        assert_eq!(
            read_header(&png_header(1200, 800)[..20]),
            Header::Truncated(ImageFormat::Png)
        );
        let mut bad = png_header(1, 1);
        bad[12..16].copy_from_slice(b"IDAT");
        assert_eq!(read_header(&bad), Header::Truncated(ImageFormat::Png));
    }

    #[test]
    fn jpeg_size_comes_from_the_first_frame_after_other_segments() {
        let mut b = vec![0xFF, 0xD8];
        // APP0 (JFIF), 16 bytes long, then a DQT of 5, fill bytes, then SOF2 (progressive).
        b.extend_from_slice(&[0xFF, 0xE0, 0x00, 0x10]);
        b.extend_from_slice(&[0u8; 14]);
        b.extend_from_slice(&[0xFF, 0xDB, 0x00, 0x05, 1, 2, 3]);
        b.extend_from_slice(&[0xFF, 0xFF, 0xC2, 0x00, 0x11, 8]);
        b.extend_from_slice(&600u16.to_be_bytes()); // height
        b.extend_from_slice(&1024u16.to_be_bytes()); // width
        b.extend_from_slice(&[3, 1, 0x22, 0]);
        assert_eq!(image_size(&b), Some((ImageFormat::Jpeg, 1024, 600)));
        // Cut before the frame: more bytes are needed.
        assert_eq!(read_header(&b[..30]), Header::Truncated(ImageFormat::Jpeg));
        // A DHT (C4) is not a frame.
        let dht = [0xFF, 0xD8, 0xFF, 0xC4, 0x00, 0x04, 0, 0, 0xFF, 0xD9];
        assert_eq!(read_header(&dht), Header::Truncated(ImageFormat::Jpeg));
    }

    #[test]
    fn gif_size_is_the_logical_screen() {
        let mut b = b"GIF89a".to_vec();
        b.extend_from_slice(&640u16.to_le_bytes());
        b.extend_from_slice(&480u16.to_le_bytes());
        assert_eq!(image_size(&b), Some((ImageFormat::Gif, 640, 480)));
        assert_eq!(
            read_header(b"GIF87a\x01"),
            Header::Truncated(ImageFormat::Gif)
        );
    }

    #[test]
    fn webp_sizes_for_lossy_lossless_and_extended() {
        let riff = |chunk: &[u8], body: &[u8]| {
            let mut b = b"RIFF\0\0\0\0WEBP".to_vec();
            b.extend_from_slice(chunk);
            b.extend_from_slice(&[0, 0, 0, 0]);
            b.extend_from_slice(body);
            b
        };
        let mut lossy = vec![0x30, 0x01, 0x00, 0x9D, 0x01, 0x2A];
        lossy.extend_from_slice(&800u16.to_le_bytes());
        lossy.extend_from_slice(&(450u16 | 0x4000).to_le_bytes()); // scale bits ignored
        assert_eq!(
            image_size(&riff(b"VP8 ", &lossy)),
            Some((ImageFormat::WebP, 800, 450))
        );
        let bits: u32 = (300 - 1) | ((200 - 1) << 14);
        let mut lossless = vec![0x2F];
        lossless.extend_from_slice(&bits.to_le_bytes());
        assert_eq!(
            image_size(&riff(b"VP8L", &lossless)),
            Some((ImageFormat::WebP, 300, 200))
        );
        let mut ext = vec![0u8; 4];
        ext.extend_from_slice(&[0x7F, 0x07, 0x00]); // 1919 → 1920
        ext.extend_from_slice(&[0x37, 0x04, 0x00]); // 1079 → 1080
        assert_eq!(
            image_size(&riff(b"VP8X", &ext)),
            Some((ImageFormat::WebP, 1920, 1080))
        );
        assert_eq!(
            read_header(&riff(b"VP8 ", &[])),
            Header::Truncated(ImageFormat::WebP)
        );
    }

    #[test]
    fn other_bytes_are_not_images() {
        assert_eq!(read_header(b"%PDF-1.7"), Header::Unknown);
        assert_eq!(read_header(b""), Header::Unknown);
        assert_eq!(read_header(b"RIFF\0\0\0\0WAVE"), Header::Unknown);
    }
}
