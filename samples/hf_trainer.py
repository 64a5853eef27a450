"""Training the way most Hugging Face users do: transformers' Trainer (through Accelerate) on a
GPT-2-like model (transformers config, 4 layers, 512 wide, random weights and tokens, no
download), bf16, gradient checkpointing, gradient clipping, its default optimizer (fused AdamW
where PyTorch has it), an evaluation every 3 of its 6 steps.

    python hf_trainer.py

stdout is the same in every run ("done": the Trainer's own printing of its timings is removed).
What the GPU checks compare with a trace goes to $SAMPLE_STATS (mt_stats.py): PyTorch's peaks and
the textbook quantities measured on the live objects at the end, as samples/train.py writes them.
"""
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback
from transformers.utils import logging as hf_logging

import mt_stats


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.x = torch.randint(0, 50257, (n, 256))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


def main():
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=512, n_head=8, n_positions=256))
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8,
                             per_device_eval_batch_size=8, max_steps=6, bf16=True,
                             gradient_checkpointing=True, eval_strategy="steps", eval_steps=3,
                             save_strategy="no", report_to=[], disable_tqdm=True,
                             logging_steps=100, dataloader_pin_memory=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(64),
                      eval_dataset=RandomTokens(16))
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    torch.cuda.synchronize()
    params = list(model.parameters())
    mt_stats.write(param_bytes=sum(mt_stats.tensor_bytes(p) for p in params),
                   grad_bytes=sum(mt_stats.tensor_bytes(p) for p in params if p.requires_grad),
                   optimizer_state_bytes=mt_stats.state_bytes(trainer.optimizer),
                   optimizer=type(trainer.optimizer.optimizer
                                  if hasattr(trainer.optimizer, "optimizer")
                                  else trainer.optimizer).__name__)
    print("done")


if __name__ == "__main__":
    main()
