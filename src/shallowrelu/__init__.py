"""shallowrelu: reproduction package for Chistikov, Englert & Lazić (NeurIPS 2023),
"Learning a Neuron by a Shallow ReLU Network: Dynamics and Implicit Bias for Correlated Inputs".

Modules: ``datasets`` (schemes, trials), ``model`` (network, loss conventions, gradients,
reference trainer), ``engine`` (batched trainer with measurements), ``metrics`` (angles,
norms), ``io`` (file layout, atomic writes, provenance), ``runs`` (train a trial and write
its files), ``cli`` (``python -m shallowrelu``).
"""

__version__ = "0.1.0"
