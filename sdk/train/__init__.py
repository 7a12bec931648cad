"""Training memory: estimate it, plan the batch to fit it, and train by the plan.

``plan_batch`` picks the micro-batch and gradient-accumulation steps from the estimate;
``fit`` runs a training loop that follows the plan. TensorFlow is imported only inside the
functions that need it.
"""

from devicefit.sdk.train.estimate import LayerMemory, TrainingMemory, TrainingMemoryModel
from devicefit.sdk.train.loop import fit
from devicefit.sdk.train.optimizers import OPTIMIZERS, get_optimizer
from devicefit.sdk.train.plan import BatchPlan, auto_memory_limit, plan_batch

__all__ = ["OPTIMIZERS", "BatchPlan", "LayerMemory", "TrainingMemory", "TrainingMemoryModel",
           "auto_memory_limit", "fit", "get_optimizer", "plan_batch"]
