// The PNG writer: draws a PlotFigure's primitives with cairo (antialiased
// lines, text in DejaVu Sans or the system's sans-serif through fontconfig).
#include <cairo.h>

#include <memory>

#include "eval/plot.h"

namespace rotor::eval {
namespace {

struct SurfaceDeleter {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};

void SetColor(cairo_t* cr, const std::string& hex) {
  double rgb[3];
  ParseColor(hex, rgb);
  cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
}

void DrawPath(cairo_t* cr, const PlotFigure& f, const PlotPath& p) {
  if (p.points.empty()) return;
  cairo_save(cr);
  if (p.clip) {
    cairo_rectangle(cr, f.clip_x, f.clip_y, f.clip_w, f.clip_h);
    cairo_clip(cr);
  }
  // Axis-parallel 1-pixel lines on pixel centres stay sharp.
  const bool crisp = p.width <= 1 && !p.clip;
  const double off = crisp ? 0.5 : 0;
  cairo_move_to(cr, p.points[0].x + off, p.points[0].y + off);
  for (size_t i = 1; i < p.points.size(); ++i)
    cairo_line_to(cr, p.points[i].x + off, p.points[i].y + off);
  SetColor(cr, p.color);
  if (p.fill) {
    cairo_close_path(cr);
    cairo_fill_preserve(cr);
  }
  const std::vector<double> dash = DashPattern(p.dash);
  cairo_set_dash(cr, dash.data(), static_cast<int>(dash.size()), 0);
  cairo_set_line_width(cr, p.width);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  if (p.width > 0) cairo_stroke(cr);
  cairo_new_path(cr);
  cairo_restore(cr);
}

void DrawText(cairo_t* cr, const PlotText& t) {
  if (t.text.empty()) return;
  cairo_save(cr);
  cairo_set_font_size(cr, t.size);
  cairo_text_extents_t ext;
  cairo_text_extents(cr, t.text.c_str(), &ext);
  const double shift = t.anchor == PlotText::Anchor::kMiddle ? ext.x_advance / 2
                       : t.anchor == PlotText::Anchor::kEnd  ? ext.x_advance
                                                             : 0;
  cairo_translate(cr, t.x, t.y);
  if (t.vertical) cairo_rotate(cr, -M_PI / 2);
  cairo_move_to(cr, -shift, 0);
  SetColor(cr, t.color);
  cairo_show_text(cr, t.text.c_str());
  cairo_restore(cr);
}

}  // namespace

Status WritePngPlot(const std::string& path, const PlotOptions& options,
                    std::span<const PlotSeries> series) {
  const PlotFigure f = LayoutPlot(options, series);
  if (f.width <= 0 || f.height <= 0 || f.width > 16384 || f.height > 16384)
    return Errorf("plot '{}': size {}x{} out of range", path, f.width, f.height);
  std::unique_ptr<cairo_surface_t, SurfaceDeleter> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, f.width, f.height));
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS)
    return Errorf("plot '{}': cannot create a {}x{} image: {}", path, f.width, f.height,
                  cairo_status_to_string(cairo_surface_status(surface.get())));
  std::unique_ptr<cairo_t, ContextDeleter> cr(cairo_create(surface.get()));
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  cairo_select_font_face(cr.get(), "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                         CAIRO_FONT_WEIGHT_NORMAL);
  for (const PlotItem& it : f.items) {
    if (it.is_text)
      DrawText(cr.get(), it.text);
    else
      DrawPath(cr.get(), f, it.path);
  }
  if (cairo_status(cr.get()) != CAIRO_STATUS_SUCCESS)
    return Errorf("plot '{}': drawing failed: {}", path,
                  cairo_status_to_string(cairo_status(cr.get())));
  cairo_surface_flush(surface.get());
  const cairo_status_t st = cairo_surface_write_to_png(surface.get(), path.c_str());
  if (st != CAIRO_STATUS_SUCCESS)
    return Errorf("cannot write '{}': {}", path, cairo_status_to_string(st));
  return Status::Ok();
}

}  // namespace rotor::eval
