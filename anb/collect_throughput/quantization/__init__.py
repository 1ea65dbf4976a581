"""Quantization analysis and quality on the target: the int8 report (:mod:`.quant_report`),
layer by layer (:mod:`.layerwise`, :mod:`.layer_times`, :mod:`.mixed_precision`), a trained model
(:mod:`.real_model`), the DPU check (:mod:`.dpu_check`) and a trained network's accuracy on the
device (:mod:`.quality`)."""
