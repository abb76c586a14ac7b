// The SVG writer: tick placement, labels, and a chart with every element.
#include "plot_svg.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace rotor::cli {
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
  EXPECT_EQ(Count(svg, "<polyline"), 2);
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

}  // namespace
}  // namespace rotor::cli
