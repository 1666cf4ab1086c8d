"""The Pair lab around the decoding core: benchmarks (bench, reference), the K/draft sweep (tune, lab), the
run history and tuned settings (history, tuned), a sweep's typed result (result), the Markdown/plot reports
(report, plots), the stored plain-decoding baselines (baselines) and the built-in prompt suite
(data/suite.jsonl). Imports app.engine and app.models only."""
