"""The notebook layer: the magics and the dashboard, thin views over the engine. The only code in
kwnb that imports IPython or ipywidgets (tests/test_layout.py checks it)."""
