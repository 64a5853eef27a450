"""A GAN's training loop on random data (no downloads): two models, two optimizers, three backward
passes a step, as PyTorch's DCGAN example trains them.

    python gan.py [--steps N] [--warmup W] [--batch B]

G maps 100 numbers to a 3x64x64 image through transposed convolutions, D an image to one logit;
both Adam (betas 0.5, 0.999). A step: D on a real batch and on G's fakes (detached), D's step;
then G through D (D's gradients are made too, and zeroed at D's next step), G's step. So no one
backward pass gives every trained parameter a gradient at the same moment that the other
optimizer's state covers: what a trace's "trained parameters" must not be fooled by.

stdout is the same in every run; $SAMPLE_STATS (mt_stats.py) gets PyTorch's peaks and the
textbook quantities measured on the live objects at the end: param_bytes (both models),
grad_bytes (every parameter is trained), optimizer_state_bytes (both optimizers' state).
"""
import argparse

import torch
from torch import nn

import mt_stats


def generator():
    def up(cin, cout):
        return [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True)]
    return nn.Sequential(nn.ConvTranspose2d(100, 512, 4, 1, 0, bias=False), nn.BatchNorm2d(512),
                         nn.ReLU(True), *up(512, 256), *up(256, 128), *up(128, 64),
                         nn.ConvTranspose2d(64, 3, 4, 2, 1, bias=False), nn.Tanh())


def discriminator():
    def down(cin, cout):
        return [nn.Conv2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2, True)]
    return nn.Sequential(nn.Conv2d(3, 64, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True),
                         *down(64, 128), *down(128, 256), *down(256, 512),
                         nn.Conv2d(512, 1, 4, 1, 0, bias=False), nn.Flatten())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    g, d = generator().to(dev), discriminator().to(dev)
    opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loss_fn = nn.BCEWithLogitsLoss()
    real = torch.randn(args.batch, 3, 64, 64, device=dev)
    ones = torch.ones(args.batch, 1, device=dev)
    zeros = torch.zeros(args.batch, 1, device=dev)

    def step():
        noise = torch.randn(args.batch, 100, 1, 1, device=dev)
        fake = g(noise)
        opt_d.zero_grad(set_to_none=True)
        loss_d = loss_fn(d(real), ones) + loss_fn(d(fake.detach()), zeros)
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad(set_to_none=True)
        loss_g = loss_fn(d(fake), ones)
        loss_g.backward()
        opt_g.step()

    for _ in range(args.warmup + args.steps):
        step()
    torch.cuda.synchronize()
    params = list(g.parameters()) + list(d.parameters())
    print(f"gan batch={args.batch} steps={args.steps}")
    mt_stats.write(param_bytes=sum(mt_stats.tensor_bytes(p) for p in params),
                   grad_bytes=sum(mt_stats.tensor_bytes(p) for p in params if p.requires_grad),
                   optimizer_state_bytes=sum(mt_stats.state_bytes(o) for o in (opt_g, opt_d)))


if __name__ == "__main__":
    main()
