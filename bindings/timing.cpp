// Bindings for the timing statistics, the adaptive sampler and the paired
// comparator. Samples come in as anything numpy can turn into float64 (lists,
// arrays) and go out as numpy arrays; enums cross as their string names.
// Everything that sorts or resamples runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "common.hpp"
#include "kernelsmith/timing/arrival.hpp"
#include "kernelsmith/timing/compare.hpp"
#include "kernelsmith/timing/sampler.hpp"
#include "kernelsmith/timing/stats.hpp"

namespace kernelsmith::bindings {

namespace {

using timing::Samples;
using InArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

Samples to_samples(const InArray& a) {
  if (a.ndim() != 1)
    throw py::value_error("samples must be one-dimensional, got ndim=" + std::to_string(a.ndim()));
  return Samples(a.data(), a.data() + a.size());
}

py::object to_array(const Samples& x) {
  // Built through numpy itself: filling a fresh array_t in place gave
  // wrong contents with the pybind11/numpy pair we build against.
  return py::module_::import("numpy").attr("array")(py::cast(x), "float64");
}

// A unary statistic over samples with the GIL released.
template <double (*F)(const Samples&)>
double unary(const InArray& a) {
  Samples x = to_samples(a);
  py::gil_scoped_release release;
  return F(x);
}

py::dict interval_dict(const timing::Interval& i) {
  py::dict d;
  d["estimate"] = i.estimate;
  d["lower"] = i.lower;
  d["upper"] = i.upper;
  d["confidence"] = i.confidence;
  d["relative_half_width"] = i.relative_half_width();
  return d;
}

py::dict summary_dict(const timing::SampleSummary& s) {
  py::dict d;
  d["n"] = s.n;
  d["n_outliers"] = s.n_outliers;
  d["median"] = interval_dict(s.median);
  d["mean"] = s.mean;
  d["stddev"] = s.stddev;
  d["cv"] = s.cv;
  d["mad"] = s.mad;
  d["min"] = s.min;
  d["max"] = s.max;
  return d;
}

}  // namespace

void init_timing(py::module_& root) {
  using namespace timing;
  py::module_ m =
      root.def_submodule("timing", "Timing statistics, adaptive sampler and paired comparator (C++ core)");

  py::class_<Interval>(m, "Interval", "A point estimate with a two-sided confidence interval.")
      .def(py::init<>())
      .def(py::init([](double estimate, double lower, double upper, double confidence) {
             Interval i;
             i.estimate = estimate;
             i.lower = lower;
             i.upper = upper;
             i.confidence = confidence;
             return i;
           }),
           py::arg("estimate"), py::arg("lower"), py::arg("upper"), py::arg("confidence") = 0.95)
      .def_readwrite("estimate", &Interval::estimate)
      .def_readwrite("lower", &Interval::lower)
      .def_readwrite("upper", &Interval::upper)
      .def_readwrite("confidence", &Interval::confidence)
      .def_property_readonly("relative_half_width", &Interval::relative_half_width)
      .def("contains", &Interval::contains, py::arg("value"))
      .def("to_dict", &interval_dict)
      .def("__repr__", [](const Interval& i) {
        return "Interval(estimate=" + std::to_string(i.estimate) + ", lower=" + std::to_string(i.lower) +
               ", upper=" + std::to_string(i.upper) + ")";
      });

  m.def(
      "wait_readable",
      [](int fd, double timeout_s) {
        py::gil_scoped_release release;
        return timing::wait_readable(fd, timeout_s);
      },
      py::arg("fd"), py::arg("timeout_s"),
      "Block until fd is readable or hung up (at most timeout_s seconds), without the interpreter's lock; the "
      "CLOCK_MONOTONIC time (time.monotonic()'s clock) at which it was, read at once, or -1.0 where it was not.");
  m.def("mean", &unary<mean>, py::arg("samples"));
  m.def("median", &unary<median>, py::arg("samples"));
  m.def("stddev", &unary<stddev>, py::arg("samples"), "Sample standard deviation (n - 1).");
  m.def("cv", &unary<cv>, py::arg("samples"), "Coefficient of variation: stddev / mean.");
  m.def("mad", &unary<mad>, py::arg("samples"), "Median absolute deviation (unscaled).");
  m.def(
      "linear_trend",
      [](const InArray& a) {
        Samples x = to_samples(a);
        LinearTrend t;
        {
          py::gil_scoped_release release;
          t = linear_trend(x);
        }
        py::dict d;
        d["intercept"] = t.intercept;
        d["slope"] = t.slope;
        d["r2"] = t.r2;
        d["relative_change"] = t.relative_change;
        return d;
      },
      py::arg("samples"),
      "Least-squares line through the samples in the order taken: intercept, slope (per sample), r2, "
      "relative_change (slope * (n - 1) / mean level).");
  m.def(
      "quantile",
      [](const InArray& a, double q) {
        Samples x = to_samples(a);
        py::gil_scoped_release release;
        return quantile(x, q);
      },
      py::arg("samples"), py::arg("q"), "Quantile with linear interpolation (numpy default).");
  m.def(
      "trimmed_mean",
      [](const InArray& a, double trim) {
        Samples x = to_samples(a);
        py::gil_scoped_release release;
        return trimmed_mean(x, trim);
      },
      py::arg("samples"), py::arg("trim") = 0.1);
  m.def(
      "reject_outliers_tukey",
      [](const InArray& a, double k) {
        Samples x = to_samples(a);
        TukeyResult t;
        {
          py::gil_scoped_release release;
          t = reject_outliers_tukey(x, k);
        }
        py::dict d;
        d["kept"] = to_array(t.kept);
        d["rejected"] = t.rejected;
        d["lower_fence"] = t.lower_fence;
        d["upper_fence"] = t.upper_fence;
        return d;
      },
      py::arg("samples"), py::arg("k") = 1.5,
      "Tukey's fences: returns {kept, rejected (indices), lower_fence, upper_fence}.");
  m.def(
      "median_ci_order_statistics",
      [](const InArray& a, double confidence) {
        Samples x = to_samples(a);
        py::gil_scoped_release release;
        return median_ci_order_statistics(x, confidence);
      },
      py::arg("samples"), py::arg("confidence") = 0.95);
  m.def(
      "bootstrap_median_ci",
      [](const InArray& a, double confidence, int resamples, std::uint64_t seed) {
        Samples x = to_samples(a);
        py::gil_scoped_release release;
        return bootstrap_median_ci(x, confidence, resamples, seed);
      },
      py::arg("samples"), py::arg("confidence") = 0.95, py::arg("resamples") = 2000, py::arg("seed") = 0);
  m.def(
      "bootstrap_ratio_of_medians_ci",
      [](const InArray& num, const InArray& den, double confidence, int resamples, std::uint64_t seed,
         bool paired) {
        Samples n = to_samples(num), d = to_samples(den);
        py::gil_scoped_release release;
        return bootstrap_ratio_of_medians_ci(n, d, confidence, resamples, seed, paired);
      },
      py::arg("numerator"), py::arg("denominator"), py::arg("confidence") = 0.95, py::arg("resamples") = 2000,
      py::arg("seed") = 0, py::arg("paired") = true);
  m.def("statistic_names", &statistic_names);
  m.def(
      "statistic",
      [](const std::string& name, const InArray& a) {
        StatisticFn f = find_statistic(name);
        Samples x = to_samples(a);
        py::gil_scoped_release release;
        return f(x);
      },
      py::arg("name"), py::arg("samples"), "A statistic from the named registry.");

  py::class_<SamplerOptions>(m, "SamplerOptions")
      .def(py::init<>())
      .def_readwrite("target_rel_half_width", &SamplerOptions::target_rel_half_width)
      .def_readwrite("confidence", &SamplerOptions::confidence)
      .def_readwrite("min_samples", &SamplerOptions::min_samples)
      .def_readwrite("max_samples", &SamplerOptions::max_samples)
      .def_readwrite("time_budget_s", &SamplerOptions::time_budget_s)
      .def_readwrite("reject_outliers", &SamplerOptions::reject_outliers)
      .def_readwrite("tukey_k", &SamplerOptions::tukey_k)
      .def_readwrite("ci_method", &SamplerOptions::ci_method)
      .def_readwrite("bootstrap_resamples", &SamplerOptions::bootstrap_resamples)
      .def_readwrite("seed", &SamplerOptions::seed)
      .def_readwrite("max_batch", &SamplerOptions::max_batch)
      .def("validate", &SamplerOptions::validate);

  m.def(
      "summarize",
      [](const InArray& a, const SamplerOptions& options) {
        Samples x = to_samples(a);
        SampleSummary s;
        {
          py::gil_scoped_release release;
          s = summarize(x, options);
        }
        return summary_dict(s);
      },
      py::arg("samples"), py::arg("options") = SamplerOptions{},
      "Median with CI, mean, stddev, cv, mad, min, max after outlier rejection, as a dict.");

  py::class_<AdaptiveSampler>(m, "AdaptiveSampler",
                              "Decides how many samples to take; the caller measures them.")
      .def(py::init<SamplerOptions>(), py::arg("options") = SamplerOptions{})
      .def(
          "add", [](AdaptiveSampler& s, const InArray& a) { s.add(to_samples(a)); }, py::arg("samples"))
      .def("add_one", py::overload_cast<double>(&AdaptiveSampler::add), py::arg("sample"))
      .def("need_more", &AdaptiveSampler::need_more, py::call_guard<py::gil_scoped_release>())
      .def("suggested_batch", &AdaptiveSampler::suggested_batch)
      .def_property_readonly("stop_reason",
                             [](const AdaptiveSampler& s) { return to_string(s.stop_reason()); })
      .def_property_readonly("samples", [](const AdaptiveSampler& s) { return to_array(s.samples()); })
      .def_property_readonly("n", [](const AdaptiveSampler& s) { return s.samples().size(); })
      .def_property_readonly("elapsed_s", &AdaptiveSampler::elapsed_s)
      .def("result", [](const AdaptiveSampler& s) {
        SamplerResult r;
        {
          py::gil_scoped_release release;
          r = s.result();
        }
        py::dict d = summary_dict(r.summary);
        d["stop_reason"] = to_string(r.stop_reason);
        d["n_total"] = r.n_total;
        d["elapsed_s"] = r.elapsed_s;
        return d;
      });

  py::class_<CompareOptions>(m, "CompareOptions")
      .def(py::init<>())
      .def_readwrite("target_rel_half_width", &CompareOptions::target_rel_half_width)
      .def_readwrite("confidence", &CompareOptions::confidence)
      .def_readwrite("min_pairs", &CompareOptions::min_pairs)
      .def_readwrite("max_pairs", &CompareOptions::max_pairs)
      .def_readwrite("time_budget_s", &CompareOptions::time_budget_s)
      .def_readwrite("stop_when_decided", &CompareOptions::stop_when_decided)
      .def_readwrite("reject_outliers", &CompareOptions::reject_outliers)
      .def_readwrite("tukey_k", &CompareOptions::tukey_k)
      .def_readwrite("method", &CompareOptions::method)
      .def_readwrite("bootstrap_resamples", &CompareOptions::bootstrap_resamples)
      .def_readwrite("seed", &CompareOptions::seed)
      .def_readwrite("max_batch", &CompareOptions::max_batch)
      .def("validate", &CompareOptions::validate);

  auto comparison_dict = [](const ComparisonResult& r) {
    py::dict d;
    d["speedup"] = interval_dict(r.speedup);
    d["verdict"] = to_string(r.verdict);
    d["stop_reason"] = to_string(r.stop_reason);
    d["n_pairs"] = r.n_pairs;
    d["n_outlier_pairs"] = r.n_outlier_pairs;
    d["reference_median"] = interval_dict(r.reference_median);
    d["candidate_median"] = interval_dict(r.candidate_median);
    d["ratio_drift"] = r.ratio_drift;
    d["elapsed_s"] = r.elapsed_s;
    return d;
  };

  m.def(
      "compare_pairs",
      [comparison_dict](const InArray& ref, const InArray& cand, const CompareOptions& options) {
        Samples r = to_samples(ref), c = to_samples(cand);
        ComparisonResult out;
        {
          py::gil_scoped_release release;
          out = compare_pairs(r, c, options);
        }
        return comparison_dict(out);
      },
      py::arg("reference"), py::arg("candidate"), py::arg("options") = CompareOptions{},
      "Speedup (reference / candidate) with CI and verdict from already measured pairs.");

  py::class_<PairedComparator>(m, "PairedComparator",
                               "Decides how many (reference, candidate) pairs to take.")
      .def(py::init<CompareOptions>(), py::arg("options") = CompareOptions{})
      .def(
          "add",
          [](PairedComparator& c, const InArray& ref, const InArray& cand) {
            c.add(to_samples(ref), to_samples(cand));
          },
          py::arg("reference"), py::arg("candidate"))
      .def("add_pair", &PairedComparator::add_pair, py::arg("reference"), py::arg("candidate"))
      .def("need_more", &PairedComparator::need_more, py::call_guard<py::gil_scoped_release>())
      .def("suggested_batch", &PairedComparator::suggested_batch)
      .def_static("reference_first", &PairedComparator::reference_first, py::arg("pair_index"))
      .def_property_readonly("stop_reason",
                             [](const PairedComparator& c) { return to_string(c.stop_reason()); })
      .def_property_readonly("n", [](const PairedComparator& c) { return c.reference_samples().size(); })
      .def_property_readonly("elapsed_s", &PairedComparator::elapsed_s)
      .def_property_readonly("reference_samples",
                             [](const PairedComparator& c) { return to_array(c.reference_samples()); })
      .def_property_readonly("candidate_samples",
                             [](const PairedComparator& c) { return to_array(c.candidate_samples()); })
      .def("result", [comparison_dict](const PairedComparator& c) {
        ComparisonResult r;
        {
          py::gil_scoped_release release;
          r = c.result();
        }
        return comparison_dict(r);
      });
}

}  // namespace kernelsmith::bindings
