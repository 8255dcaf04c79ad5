"""kwnb's corpus of multi-worker programs: public ones and learner mistakes, each with the verdict kwnb must
give (entries.py); run by benchmarks/corpus.py (under kwnb and by hand) and tests/test_corpus.py (under kwnb)."""
