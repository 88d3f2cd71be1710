// Structural checks of JPEG and PNG files run before stb_image decodes them (its gaps, see the .cpp).
#pragma once
#include <cstdio>
#include <string>

namespace mpx::data {

/// Walks the segments of the image file `f` (from its current position, which is restored) and
/// returns why it must not be handed to stb_image ("" when it may, or when it is neither a JPEG
/// nor a PNG): a JPEG Huffman table (DHT segment) declaring more than 256 codes, which stb_image
/// 2.27 (Debian 12's) writes past its tables for, a PNG chunk declaring more bytes than the file
/// holds, for which stb_image allocates the declared size (up to 2 GB) before reading it, or an
/// empty PNG IDAT chunk, which it copies to a null pointer.
std::string image_structure_problem(std::FILE* f);

/// Whether `f` (from its current position, which is restored) holds a JPEG as stb_image tells
/// one: 0xFF fill bytes, then the SOI marker.
bool is_jpeg(std::FILE* f);

}  // namespace mpx::data
