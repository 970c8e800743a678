/* A region of a JPEG through libjpeg-turbo's libjpeg API (the `turbojpeg`
 * build feature): the rows above it are skipped (entropy-decoded only, no
 * IDCT or colour conversion: jpeg_skip_scanlines), the columns beside it
 * left out (jpeg_crop_scanline, to the iMCU boundary at its left), and the
 * rows below it never read (jpeg_abort_decompress). A random-resized crop
 * keeps about half an image, so most of a full decode's IDCT and colour
 * work is not done. The TurboJPEG API that turbo.rs calls for whole images
 * has no region decode before libjpeg-turbo 3.0 (tj3SetCroppingRegion).
 *
 * As strict as the whole-image path (TJFLAG_STOPONWARNING): a warning (a
 * truncated or corrupt scan in the rows read) is an error. Damage below the
 * region goes unread by a run; `tricklab data check` decodes every file
 * whole, and a cut-off file is refused by its missing end marker first. */
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>

struct tl_error {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

static void tl_error_exit(j_common_ptr c) {
  struct tl_error *e = (struct tl_error *)c->err;
  (*c->err->format_message)(c, e->message);
  longjmp(e->jump, 1);
}

/* Level -1 is a warning (corrupt data): an error here; trace messages pass. */
static void tl_emit_message(j_common_ptr c, int level) {
  if (level < 0) tl_error_exit(c);
}

/* The region x, y, w, h (at 1/denom of the sides; 0 < w, h and inside the
 * scaled picture) into `out` (capacity `cap` bytes, RGB rows of the width
 * it returns). Returns 0 with the region decoded at *ox, *oy (its left edge
 * moved to an iMCU boundary, so *ow >= w), 1 where the colour space is not
 * one libjpeg turns into RGB (CMYK, YCCK: the caller decodes otherwise), and
 * -1 with a message in `err`. */
int tricklab_jpeg_region(const unsigned char *buf, unsigned long len, int denom,
                         int x, int y, int w, int h, unsigned char *out,
                         unsigned long cap, int *ox, int *oy, int *ow, int *oh,
                         char *err, int err_len) {
  struct jpeg_decompress_struct cinfo;
  struct tl_error jerr;
  cinfo.err = jpeg_std_error(&jerr.pub);
  jerr.pub.error_exit = tl_error_exit;
  jerr.pub.emit_message = tl_emit_message;
  jerr.message[0] = 0;
  if (setjmp(jerr.jump)) {
    snprintf(err, err_len, "%s", jerr.message);
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, buf, len);
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  cinfo.out_color_space = JCS_RGB;
  cinfo.scale_num = 1;
  cinfo.scale_denom = (unsigned int)denom;
  /* TurboJPEG's defaults, as the whole-image path decodes. */
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&cinfo);
  if (x < 0 || y < 0 || w <= 0 || h <= 0 ||
      (JDIMENSION)(x + w) > cinfo.output_width ||
      (JDIMENSION)(y + h) > cinfo.output_height) {
    snprintf(err, err_len, "region %dx%d at %d,%d outside the %ux%u picture", w,
             h, x, y, cinfo.output_width, cinfo.output_height);
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  JDIMENSION xoff = (JDIMENSION)x, width = (JDIMENSION)w;
  if (width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &xoff, &width);
  if ((unsigned long)width * (unsigned long)h * 3 > cap) {
    snprintf(err, err_len, "region %ux%d larger than its buffer", width, h);
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  if (y > 0) jpeg_skip_scanlines(&cinfo, (JDIMENSION)y);
  while (cinfo.output_scanline < (JDIMENSION)(y + h)) {
    JSAMPROW row = out + (unsigned long)(cinfo.output_scanline - y) * width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  *ox = (int)xoff;
  *oy = y;
  *ow = (int)width;
  *oh = h;
  /* The rows below the region are never read. */
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return 0;
}
