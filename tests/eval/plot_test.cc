// The chart writers: tick placement, labels, a chart with every element, in
// SVG and in PNG (read back and checked pixel by pixel).
#include "eval/plot.h"

#include <cairo.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace rotor::eval {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pointwise;

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(PlotSvg, LinearTicksAreRound) {
  EXPECT_THAT(LinearTicks(0, 20000, 4), ElementsAre(0, 5000, 10000, 15000, 20000));
  EXPECT_THAT(LinearTicks(0, 19500, 8),
              ElementsAre(0, 2000, 4000, 6000, 8000, 10000, 12000, 14000, 16000, 18000, 20000));
  EXPECT_THAT(LinearTicks(3.4, 4.6, 6),
              Pointwise(DoubleNear(1e-9), std::vector<double>{3.4, 3.6, 3.8, 4.0, 4.2, 4.4, 4.6}));
  EXPECT_THAT(LinearTicks(1, 1, 5), ElementsAre(1));
}

TEST(PlotSvg, LogTicksFollowDecades) {
  EXPECT_THAT(LogTicks(2, 500), ElementsAre(2, 5, 10, 20, 50, 100, 200, 500));
  EXPECT_THAT(LogTicks(1, 1e6), ElementsAre(1, 10, 100, 1000, 1e4, 1e5, 1e6));
}

TEST(PlotSvg, TickLabels) {
  EXPECT_EQ(TickLabel(0), "0");
  EXPECT_EQ(TickLabel(0.5), "0.5");
  EXPECT_EQ(TickLabel(20), "20");
  EXPECT_EQ(TickLabel(15000), "15000");
  EXPECT_EQ(TickLabel(1e6), "1e+06");
}

TEST(PlotSvg, ChartHasLinesLegendAxesAndMarkers) {
  std::vector<PlotSeries> series(2);
  series[0].label = "full (-c 2000)";
  series[0].x = {250, 750, 1250, 1750};
  series[0].y = {4, 6, 400, INFINITY};
  series[1].label = "sink<128> & co";
  series[1].x = series[0].x;
  series[1].y = {4, 4.2, 4.1, 4};
  series[1].dash = 1;
  PlotOptions o;
  o.title = "Perplexity per window";
  o.x_label = "position";
  o.y_label = "perplexity (log scale)";
  o.log_y = true;
  o.markers.push_back({512, "trained context 512"});
  const std::string svg = RenderSvgPlot(o, series);
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_EQ(Count(svg, "clip-path=\"url(#plot)\""), 2);  // the two series
  EXPECT_THAT(svg, HasSubstr("sink&lt;128&gt; &amp; co"));
  EXPECT_THAT(svg, Not(HasSubstr("sink<128>")));
  EXPECT_THAT(svg, HasSubstr(">Perplexity per window<"));
  EXPECT_THAT(svg, HasSubstr(">position<"));
  EXPECT_THAT(svg, HasSubstr(">trained context 512<"));
  EXPECT_THAT(svg, HasSubstr(">500<"));   // a log tick
  EXPECT_THAT(svg, HasSubstr(">1800<"));  // the x axis ends on a tick
  EXPECT_THAT(svg, HasSubstr("stroke-dasharray=\"7,4\""));
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
  EXPECT_THAT(svg, Not(HasSubstr("inf")));
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
}

TEST(PlotSvg, WritesAFileOrNamesThePath) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "rotor-plot-test.svg").string();
  std::vector<PlotSeries> series(1);
  series[0].label = "a";
  series[0].x = {0, 1};
  series[0].y = {1, 2};
  ASSERT_TRUE(WriteSvgPlot(path, PlotOptions{}, series).ok());
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), RenderSvgPlot(PlotOptions{}, series));
  std::filesystem::remove(path);
  Status s = WriteSvgPlot("/nonexistent-dir/x.svg", PlotOptions{}, series);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent-dir/x.svg"));
}

// Pixels of `surface` within `tol` of colour #rrggbb.
int CountColor(cairo_surface_t* surface, const std::string& hex, int tol) {
  double rgb[3];
  ParseColor(hex, rgb);
  const int w = cairo_image_surface_get_width(surface), h = cairo_image_surface_get_height(surface);
  const int stride = cairo_image_surface_get_stride(surface);
  const unsigned char* data = cairo_image_surface_get_data(surface);
  int n = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint32_t px;
      std::memcpy(&px, data + y * stride + 4 * x, 4);
      const int c[3] = {static_cast<int>(px >> 16 & 255), static_cast<int>(px >> 8 & 255),
                        static_cast<int>(px & 255)};
      bool near = true;
      for (int i = 0; i < 3; ++i) near &= std::abs(c[i] - static_cast<int>(rgb[i] * 255)) <= tol;
      n += near;
    }
  return n;
}

// Dark pixels (text, axes) inside a rectangle.
int CountDark(cairo_surface_t* surface, int x0, int y0, int x1, int y1) {
  const int stride = cairo_image_surface_get_stride(surface);
  const unsigned char* data = cairo_image_surface_get_data(surface);
  int n = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      uint32_t px;
      std::memcpy(&px, data + y * stride + 4 * x, 4);
      n += (px >> 16 & 255) < 100 && (px >> 8 & 255) < 100 && (px & 255) < 100;
    }
  return n;
}

TEST(PlotPng, DrawsLinesTextAndLegend) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "rotor-plot-test.png").string();
  std::vector<PlotSeries> series(2);
  series[0].label = "full";
  series[0].x = {0, 500, 1000, 1500, 2000};
  series[0].y = {4, 5, 6, 5, 4};
  series[0].color = "#d62728";
  series[1].label = "window";
  series[1].x = series[0].x;
  series[1].y = {4, 40, 400, INFINITY, 4000};
  series[1].color = "#2ca02c";
  series[1].dash = 1;
  PlotOptions o;
  o.title = "Perplexity per window";
  o.x_label = "position";
  o.y_label = "perplexity";
  o.log_y = true;
  ASSERT_TRUE(WritePlot(path, o, series).ok());
  cairo_surface_t* img = cairo_image_surface_create_from_png(path.c_str());
  ASSERT_EQ(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
  EXPECT_EQ(cairo_image_surface_get_width(img), o.width);
  EXPECT_EQ(cairo_image_surface_get_height(img), o.height);
  // Both series are drawn (lines 1.8 px wide over hundreds of pixels), the
  // background is white, the title and axis labels are rendered text.
  EXPECT_GT(CountColor(img, "#d62728", 40), 300);
  EXPECT_GT(CountColor(img, "#2ca02c", 40), 300);
  EXPECT_EQ(CountColor(img, "#9467bd", 10), 0);  // a palette colour not used
  EXPECT_GT(CountColor(img, "#ffffff", 0), o.width * o.height / 2);
  EXPECT_GT(CountDark(img, o.width / 2 - 100, 10, o.width / 2 + 100, 34), 50);  // title
  EXPECT_GT(CountDark(img, 8, o.height / 2 - 40, 26, o.height / 2 + 40), 30);  // y label
  EXPECT_EQ(CountDark(img, 0, 0, 8, 8), 0);
  cairo_surface_destroy(img);
  std::filesystem::remove(path);
}

TEST(PlotPng, ErrorsNameThePathOrFormat) {
  std::vector<PlotSeries> series(1);
  series[0].x = {0, 1};
  series[0].y = {1, 2};
  Status s = WritePlot("/nonexistent-dir/x.png", PlotOptions{}, series);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent-dir/x.png"));
  s = WritePlot("chart.gif", PlotOptions{}, series);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("chart.gif"));
  EXPECT_THAT(s.message(), HasSubstr(".png"));
}

TEST(PlotPng, SameLayoutAsSvg) {
  std::vector<PlotSeries> series(3);
  for (int i = 0; i < 3; ++i) {
    series[i].label = "s" + std::to_string(i);
    series[i].x = {0, 10, 20};
    series[i].y = {1.0 + i, 2.0 + i, 3.0 + i};
  }
  const PlotFigure f = LayoutPlot(PlotOptions{}, series);
  int paths = 0, texts = 0;
  for (const PlotItem& it : f.items) (it.is_text ? texts : paths)++;
  const std::string svg = RenderSvgPlot(PlotOptions{}, series);
  EXPECT_EQ(Count(svg, "<polyline"), paths);
  EXPECT_EQ(Count(svg, "<text"), texts);
}

}  // namespace
}  // namespace rotor::eval
