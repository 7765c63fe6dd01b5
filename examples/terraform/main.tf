terraform {
  required_providers {
    random = { source = "hashicorp/random", version = "3.6.0" }
    null   = { source = "hashicorp/null", version = "2.1.2" }
  }
}

variable "envs" {
  type    = set(string)
  default = ["dev", "prod"]
}

variable "prefix" {
  type    = string
  default = "shop"
}

resource "random_pet" "db" {
  for_each = var.envs
  prefix   = "${var.prefix}-${each.key}"
  length   = 2
  lifecycle {
    ignore_changes = [length]
  }
}

resource "random_password" "admin" {
  length  = 20
  special = false
}

resource "null_resource" "announce" {
  triggers = {
    dev_db  = random_pet.db["dev"].id
    summary = "databases for ${var.prefix}"
  }
  lifecycle {
    prevent_destroy = true
  }
}

output "prod_db" {
  value = random_pet.db["prod"].id
}
