"""How uncertain a surrogate's prediction is, beyond its members' spread and label noise.

- :mod:`~anb.surrogates.uncertainty.support`: where the training data lie (distance, cost
  range, holes, unseen units), the measures the std terms multiply;
- :mod:`~anb.surrogates.uncertainty.holes`: internal hold-outs that learn those std terms;
- :mod:`~anb.surrogates.uncertainty.learn`: the order fitting learns them in;
- :mod:`~anb.surrogates.uncertainty.terms`: one target's learned terms (``StdTerms``, which
  fitting computes and ``TargetSurrogate.fit`` stores) and the one way they combine;
- :mod:`~anb.surrogates.uncertainty.noise`: observation noise, what a repeated measurement
  varies by (``noise=True`` draws).
"""
