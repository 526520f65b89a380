"""How the soak benchmark judges a run (:meth:`SoakReport.problems`), on recorded figures."""

from __future__ import annotations

from bench.soak import ProcessFigures, SoakReport, SoakSample

#: Store MiB and Python RSS of the 1,000-checkpoint run in bench/results/soak/2026-11-23-1957.md.
RECORDED = [(0.95, 154.7), (1.15, 155.6), (0.72, 157.8), (0.92, 158.3), (1.17, 159.0), (0.79, 159.4),
            (0.96, 160.1), (1.59, 160.5), (1.70, 161.3), (1.00, 162.0)]


def _report(figures: list[tuple[float, float]], fds: int = 344) -> SoakReport:
    report = SoakReport(checkpoints=100 * len(figures), interval=0.1)
    for i, (store_mib, rss) in enumerate(figures, start=1):
        report.samples.append(SoakSample(100 * i, float(i), int(store_mib * 2**20), 60, 10 * 2**20,
                                         ProcessFigures(rss, 11, 11), ProcessFigures(1450.0, fds, 300)))
    return report


def test_a_store_swinging_with_state_maintenance_is_bounded() -> None:
    assert _report(RECORDED).problems() == []


def test_a_store_that_keeps_growing_is_not() -> None:
    leaking = [(0.9 + 0.3 * i, 155.0) for i in range(10)]
    assert any("store level grew" in p for p in _report(leaking).problems())


def test_a_single_sample_far_above_the_level_is_reported() -> None:
    spiking = [(1.0, 155.0)] * 9 + [(3.5, 155.0)]
    assert any("over 3 times" in p for p in _report(spiking).problems())


def test_memory_more_than_ten_percent_over_the_first_sample_and_descriptor_growth_are_reported() -> None:
    problems = _report([(1.0, 150.0 + 2 * i) for i in range(10)], fds=400).problems()
    assert any("python resident memory" in p for p in problems)
    assert _report([(1.0, 150.0)] * 10).problems() == []
    grown = _report([(1.0, 150.0)] * 10)
    grown.samples[-1] = SoakSample(1000, 10.0, 2**20, 60, 0, ProcessFigures(150.0, 11, 11),
                                   ProcessFigures(1450.0, 400, 300))
    assert any("jvm descriptors grew" in p for p in grown.problems())
